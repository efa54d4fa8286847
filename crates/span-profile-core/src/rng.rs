//! One small random-number generator for every crate of the workspace.

/// xorshift64*: deterministic from its seed, dependency-free, no allocation or system call,
/// so the sampling path may use it. Not for anything secret.
///
/// ```
/// use span_profile_core::internal::XorShift;
/// let mut a = XorShift::new(42);
/// let mut b = XorShift::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// assert_eq!(a.below(0), 0);
/// // A zero seed would stay zero forever; it is replaced.
/// assert_ne!(XorShift::new(0).next_u64(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct XorShift(pub u64);

impl XorShift {
    /// A generator started from `seed` (0 is replaced by a fixed odd constant).
    pub const fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// A generator seeded from the clock, a stack address and the process id: different in
    /// each process and each call, for jitter and ids.
    pub fn seeded() -> Self {
        let t = crate::time::now_unix_ns();
        let addr = std::ptr::addr_of!(t) as u64;
        Self::new(t ^ addr.rotate_left(32) ^ u64::from(std::process::id()) | 1)
    }

    /// The next number. The state must not be 0 (it would stay 0; [`XorShift::new`] avoids it).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0). The modulo bias is below `n / 2^64`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// One of `from`, which must not be empty.
    pub fn pick<'a, T: ?Sized>(&mut self, from: &[&'a T]) -> &'a T {
        from[self.below(from.len() as u64) as usize]
    }
}
