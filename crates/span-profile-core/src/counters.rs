//! [`counters!`](crate::counters): a struct of atomic counters and its snapshot struct,
//! declared from one field list.

/// Declares a struct of `AtomicU64` counters, updated from any thread, and the plain struct of
/// `u64`s that its `snapshot()` returns, from one list of fields, so the two cannot drift
/// apart. Each field's doc comment documents both.
///
/// Every counter is an independent statistic: `snapshot` loads each with `Relaxed` ordering,
/// and writers should add with `Relaxed` too, since no other memory is published through them.
///
/// After the counted fields, each struct may have more of its own, in a `+ { .. }` block:
/// atomics that are not reported (on the counters), or values the snapshot does not count
/// (on the snapshot; `snapshot` leaves them at their `Default`, for the caller to fill in
/// with struct update syntax).
///
/// Part of the workspace's internals (`span_profile_core::internal`), not a stable API.
///
/// ```
/// span_profile_core::counters! {
///     /// What the example counts.
///     pub struct Counters(pub) {
///         /// Things seen.
///         seen,
///         /// Things dropped.
///         dropped,
///     } + {
///         /// Not reported.
///         scratch,
///     }
///     /// A snapshot of [`Counters`].
///     #[non_exhaustive]
///     pub struct Stats + {
///         /// Filled in by the caller.
///         stopped: bool,
///     }
/// }
///
/// use std::sync::atomic::Ordering::Relaxed;
/// let c = Counters::default();
/// c.seen.fetch_add(3, Relaxed);
/// c.scratch.fetch_add(9, Relaxed);
/// let s = Stats { stopped: true, ..c.snapshot() };
/// assert_eq!((s.seen, s.dropped, s.stopped), (3, 0, true));
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! counters {
    (
        $(#[$cmeta:meta])*
        $cvis:vis struct $counters:ident ($fvis:vis) {
            $( $(#[$fmeta:meta])* $field:ident ),* $(,)?
        } $( + {
            $( $(#[$umeta:meta])* $ufield:ident ),* $(,)?
        } )?
        $(#[$smeta:meta])*
        $svis:vis struct $stats:ident $( + {
            $( $(#[$emeta:meta])* $efield:ident : $ety:ty ),* $(,)?
        } )?
    ) => {
        $(#[$cmeta])*
        #[derive(Debug, Default)]
        $cvis struct $counters {
            $( $(#[$fmeta])* $fvis $field: ::std::sync::atomic::AtomicU64, )*
            $( $( $(#[$umeta])* $fvis $ufield: ::std::sync::atomic::AtomicU64, )* )?
        }

        $(#[$smeta])*
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        $svis struct $stats {
            $( $(#[$fmeta])* pub $field: u64, )*
            $( $( $(#[$emeta])* pub $efield: $ety, )* )?
        }

        impl $counters {
            /// Current values (each loaded `Relaxed`: independent statistics).
            #[allow(clippy::needless_update)]
            $cvis fn snapshot(&self) -> $stats {
                $stats {
                    $( $field: self.$field.load(::std::sync::atomic::Ordering::Relaxed), )*
                    ..::std::default::Default::default()
                }
            }
        }
    };
}
