//! What the last tick's thread listing found, and which of it this tick need not read (ADR 0038).
//!
//! The walker follows each interpreter's thread list from its head through every thread
//! state's `next` at every tick. For a thread that waits, that copy is most of what its tick
//! costs: a thread state lives apart from the others, on lines no other tick's work keeps in
//! the cache. [`LastListing`] keeps the first interpreter's list as the last tick found it
//! and lets this tick take a thread state's fields from there, without reading it, when its
//! thread and the next one in the list provably have not run since before that listing
//! ([`crate::walker::sched::SchedWatch::proven_idle`]). The argument, for CPython 3.9–3.13:
//!
//! - a thread state joins its list only at the head (`new_threadstate`, `add_threadstate`):
//!   that changes the head and the old head's `prev`, never another state's `next`;
//! - it leaves the list when its own thread deletes it (the thread ends, or a
//!   `PyGILState_Release` lets it go), which that thread cannot do without running;
//! - so a state whose thread has not run is still listed, with the same thread id, and its
//!   `next` still points where it pointed, if the thread of that next state has not run
//!   either: nothing could have unlinked it.
//!
//! A new thread's state can be listed before the thread takes it: 3.12+ list it unbound
//! (thread id 0, set once by `_PyThreadState_Bind`), never taken from an earlier listing; 3.9–3.11
//! list it under the id of the thread that starts it until the new thread sets its own, and two
//! states under one id reset the scheduler slot they share at each walk, so neither is proven
//! idle meanwhile.
//!
//! The head pointer, the list's last state (a `next` of 0 is taken from memory), every state
//! whose thread ran or is not watched and the state before it, and every state that is not
//! where the last listing had it (a new one, or one the listing has not found its place in the
//! old list again after a change) are read as before.
//! One exception escapes the argument: CPython lets any thread delete another's state
//! (`PyThreadState_Delete`, used by embedders and at interpreter teardown). Against it every
//! [`FULL_LISTING_EVERY`]th tick reads every state, so a state deleted that way is sampled
//! from its old copy for at most that many ticks. Its memory is never read: a skipped state is
//! not dereferenced at all.

/// Every this many ticks the listing reads every thread state (module docs).
pub(crate) const FULL_LISTING_EVERY: u64 = 16;
/// Most thread states a listing remembers (the rest are read every tick).
pub(crate) const MAX_REMEMBERED: usize = 1024;
/// Most searches per listing for a state that is not where the last listing had it (each is
/// linear in the list; a new thread costs one).
const MAX_SEARCHES: u32 = 8;

/// One thread found in the thread list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ThreadRef {
    pub(crate) tstate: u64,
    /// Its interpreter (`PyThreadState.interp`).
    pub(crate) interp: u64,
    pub(crate) thread_id: u64,
    pub(crate) native: u64,
    /// Its frame pointer (`frame` or `cframe`) and its `datastack_chunk` / `datastack_top`
    /// (3.11+; 0 otherwise): not read by the listing, but when the thread is walked, after
    /// its CPU clock (`PythonWalker::refresh_before_walk`).
    pub(crate) frame_field: u64,
    pub(crate) chunk: u64,
    pub(crate) top: u64,
}

/// What the listing keeps of a thread state: where it is and whose it is (its interpreter is
/// the listing's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Known {
    tstate: u64,
    thread_id: u64,
    native: u64,
}

impl Known {
    fn of(t: &ThreadRef) -> Self {
        Self {
            tstate: t.tstate,
            thread_id: t.thread_id,
            native: t.native,
        }
    }
}

/// The first interpreter's thread list as the last complete listing found it, in list order,
/// and the listing being made now (module docs).
///
/// A listing that finds the same list as the last one writes nothing: it counts the entries it
/// found the same, and copies them only at its first difference.
#[derive(Debug, Default)]
pub(crate) struct LastListing {
    known: Vec<Known>,
    /// The interpreter whose list it is.
    interp: u64,
    /// The tick that made it.
    tick: u64,
    /// Whether each entry's thread provably has not run since before that listing, as found
    /// at this tick's start ([`LastListing::mark_idle`]).
    idle: Vec<bool>,
    /// The listing under way: its first `same` entries are `known`'s; once it `diverged`, all
    /// of it is in `next`.
    same: usize,
    diverged: bool,
    next: Vec<Known>,
    searches: u32,
}

impl LastListing {
    /// The last listing's thread-state addresses, in list order.
    pub(crate) fn states(&self) -> impl Iterator<Item = u64> + '_ {
        self.known.iter().map(|k| k.tstate)
    }

    /// At the start of tick `tick`: finds, with `is_idle(thread_id, tstate)`, which of the
    /// last listing's threads provably have not run since before it. None has when that
    /// listing was not made by the tick just before, or this tick is a full listing
    /// ([`FULL_LISTING_EVERY`]).
    pub(crate) fn mark_idle(&mut self, tick: u64, is_idle: impl Fn(u64, u64) -> bool) {
        self.idle.clear();
        let usable = self.tick.wrapping_add(1) == tick && !tick.is_multiple_of(FULL_LISTING_EVERY);
        self.idle.extend(
            self.known
                .iter()
                .map(|k| usable && k.thread_id != 0 && is_idle(k.thread_id, k.tstate)),
        );
    }

    /// Whether this tick will read the state at position `i` of the last listing (not
    /// [`LastListing::skippable`] there).
    pub(crate) fn will_read(&self, i: usize) -> bool {
        !self.skips_at(i)
    }

    fn skips_at(&self, i: usize) -> bool {
        self.idle.get(i) == Some(&true) && self.idle.get(i + 1) == Some(&true)
    }

    /// Starts a listing of interpreter `interp`'s list, whose head is `head`; returns the
    /// head's position in the last listing. Nothing is skipped from another interpreter's.
    pub(crate) fn start(&mut self, head: u64, interp: u64) -> Option<usize> {
        self.same = 0;
        self.diverged = false;
        self.searches = 0;
        if interp != self.interp {
            self.idle.clear();
            self.interp = interp;
            self.known.clear();
        }
        self.find(head, 0)
    }

    /// At position `pos` of the last listing: the thread found there and the next state's
    /// address, without reading the state, when neither its thread nor the next one's has run
    /// since (module docs).
    pub(crate) fn skippable(&self, pos: Option<usize>) -> Option<(ThreadRef, u64)> {
        let i = pos.filter(|&i| self.skips_at(i))?;
        let k = self.known.get(i)?;
        let t = ThreadRef {
            tstate: k.tstate,
            interp: self.interp,
            thread_id: k.thread_id,
            native: k.native,
            ..ThreadRef::default()
        };
        Some((t, self.known.get(i + 1)?.tstate))
    }

    /// The position in the last listing of `next`, the state after the one at `pos`.
    pub(crate) fn follow(&mut self, pos: Option<usize>, next: u64) -> Option<usize> {
        let from = pos.map_or(0, |i| i + 1);
        if self.known.get(from).map(|k| k.tstate) == Some(next) {
            return Some(from);
        }
        self.find(next, from)
    }

    /// Searches the last listing from position `from` on (old states keep their order: new
    /// ones go to the head), at most [`MAX_SEARCHES`] times a listing.
    fn find(&mut self, tstate: u64, from: usize) -> Option<usize> {
        if tstate == 0 || self.searches >= MAX_SEARCHES {
            return None;
        }
        self.searches += 1;
        let rest = self.known.get(from..)?;
        rest.iter()
            .position(|k| k.tstate == tstate)
            .map(|j| from + j)
    }

    /// Adds a thread to the listing under way (up to [`MAX_REMEMBERED`]).
    pub(crate) fn push(&mut self, t: &ThreadRef) {
        let k = Known::of(t);
        if !self.diverged {
            if self.known.get(self.same) == Some(&k) {
                self.same += 1;
                return;
            }
            self.diverged = true;
            self.next.clear();
            self.next
                .extend_from_slice(self.known.get(..self.same).unwrap_or_default());
        }
        if self.next.len() < MAX_REMEMBERED {
            self.next.push(k);
        }
    }

    /// The listing under way followed the whole list at tick `tick`: it becomes the last one.
    pub(crate) fn complete(&mut self, tick: u64) {
        if self.diverged {
            std::mem::swap(&mut self.known, &mut self.next);
        } else {
            // The same list, or its first `same` entries (its end left).
            self.known.truncate(self.same);
        }
        self.tick = tick;
    }

    /// How many thread states the last listing remembers.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.known.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tstate: u64) -> ThreadRef {
        ThreadRef {
            tstate,
            interp: 1,
            thread_id: tstate * 10,
            native: tstate * 100,
            ..ThreadRef::default()
        }
    }

    /// Lists `states` at `tick` as a full walk of them would.
    fn list(l: &mut LastListing, states: &[u64], tick: u64) {
        l.start(states.first().copied().unwrap_or(0), 1);
        for &s in states {
            l.push(&t(s));
        }
        l.complete(tick);
    }

    /// Follows the list `now` (the states in the image) the way the walker does: a state is
    /// read unless skippable; returns the states that had to be read and the threads found.
    fn follow(l: &mut LastListing, now: &[u64]) -> (Vec<u64>, Vec<u64>) {
        let (mut read, mut found) = (vec![], vec![]);
        let mut cur = now.first().copied().unwrap_or(0);
        let mut pos = l.start(cur, 1);
        while cur != 0 {
            let (th, next) = match l.skippable(pos) {
                Some(x) => x,
                None => {
                    read.push(cur);
                    let at = now.iter().position(|&s| s == cur).unwrap();
                    (t(cur), now.get(at + 1).copied().unwrap_or(0))
                }
            };
            found.push(th.thread_id);
            assert_eq!(th, t(cur), "a skipped state is the one the image has there");
            l.push(&th);
            pos = l.follow(pos, next);
            cur = next;
        }
        (read, found)
    }

    #[test]
    fn a_run_of_waiting_threads_is_not_read_but_its_last_state_is() {
        let mut l = LastListing::default();
        list(&mut l, &[1, 2, 3, 4], 1);
        l.mark_idle(2, |_, _| true);
        assert!(!l.will_read(0) && !l.will_read(2));
        assert!(
            l.will_read(3),
            "the list's end is read: its next comes from memory"
        );
        assert_eq!(
            follow(&mut l, &[1, 2, 3, 4]),
            (vec![4], vec![10, 20, 30, 40])
        );
    }

    #[test]
    fn a_thread_that_ran_is_read_and_so_is_the_one_before_it() {
        let mut l = LastListing::default();
        list(&mut l, &[1, 2, 3, 4], 1);
        l.mark_idle(2, |_, s| s != 3);
        // 2's next is 3, whose thread ran (it may have left the list): 2 is read too.
        assert_eq!(follow(&mut l, &[1, 2, 3, 4]).0, [2, 3, 4]);
        // 3 did leave: 2 is read and points past it.
        list(&mut l, &[1, 2, 3, 4], 3);
        l.mark_idle(4, |_, s| s != 3);
        assert_eq!(follow(&mut l, &[1, 2, 4]), (vec![2, 4], vec![10, 20, 40]));
    }

    #[test]
    fn a_new_head_is_read_and_the_old_list_after_it_is_not() {
        let mut l = LastListing::default();
        list(&mut l, &[1, 2, 3], 1);
        l.mark_idle(2, |_, _| true);
        let (read, found) = follow(&mut l, &[9, 8, 1, 2, 3]);
        assert_eq!(read, [9, 8, 3]);
        assert_eq!(found, [90, 80, 10, 20, 30]);
        // That listing is the one the next tick starts from.
        l.complete(2);
        l.mark_idle(3, |_, _| true);
        assert_eq!(follow(&mut l, &[9, 8, 1, 2, 3]).0, [3]);
    }

    #[test]
    fn nothing_is_skipped_after_a_missed_tick_at_a_full_listing_or_for_an_unbound_state() {
        let mut l = LastListing::default();
        list(&mut l, &[1, 2, 3], 5);
        l.mark_idle(7, |_, _| true);
        assert_eq!(
            follow(&mut l, &[1, 2, 3]).0,
            [1, 2, 3],
            "made two ticks ago"
        );
        list(&mut l, &[1, 2, 3], FULL_LISTING_EVERY - 1);
        l.mark_idle(FULL_LISTING_EVERY, |_, _| true);
        assert_eq!(follow(&mut l, &[1, 2, 3]).0, [1, 2, 3], "a full listing");
        l.start(1, 1);
        l.push(&t(1));
        l.push(&ThreadRef {
            thread_id: 0,
            ..t(2)
        });
        l.push(&t(3));
        l.complete(20);
        l.mark_idle(21, |_, _| true);
        // 1's next is an unbound state (its thread id is not final): 1 and 2 are read.
        assert_eq!(follow(&mut l, &[1, 2, 3]).0, [1, 2, 3]);
    }

    #[test]
    fn a_listing_keeps_what_it_found_when_the_list_is_the_same_or_lost_its_end() {
        let mut l = LastListing::default();
        list(&mut l, &[1, 2, 3], 1);
        l.mark_idle(2, |_, _| true);
        follow(&mut l, &[1, 2, 3]);
        assert!(!l.diverged, "the same list is not copied");
        l.complete(2);
        assert_eq!(l.states().collect::<Vec<_>>(), [1, 2, 3]);
        l.mark_idle(3, |_, s| s != 3);
        follow(&mut l, &[1, 2]);
        l.complete(3);
        assert_eq!(l.states().collect::<Vec<_>>(), [1, 2]);
        // Another interpreter's list is not the last one's.
        l.start(1, 2);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn a_listing_remembers_a_bounded_prefix_and_searches_a_bounded_number_of_times() {
        let mut l = LastListing::default();
        let many: Vec<u64> = (1..=(MAX_REMEMBERED as u64 + 10)).collect();
        list(&mut l, &many, 1);
        assert_eq!(l.len(), MAX_REMEMBERED);
        l.mark_idle(2, |_, _| true);
        let (read, found) = follow(&mut l, &many);
        assert_eq!(found.len(), many.len());
        // The last remembered state's next is not remembered: it and the rest are read.
        assert_eq!(read.len(), 11);
        // The old head right after new ones is found without a search.
        let mut now: Vec<u64> = (5000..5020).collect();
        now.extend([1, 2, 3, 4, 5]);
        list(&mut l, &[1, 2, 3, 4, 5], 10);
        l.mark_idle(11, |_, _| true);
        assert_eq!(follow(&mut l, &now).0.len(), 21);
        // Twenty new heads and the old head gone: after MAX_SEARCHES misses the old list is
        // not looked for again, and the rest is read.
        now.retain(|&s| s != 1 && s != 2);
        list(&mut l, &[1, 2, 3, 4, 5], 12);
        l.mark_idle(13, |_, s| s > 2);
        assert_eq!(follow(&mut l, &now).0.len(), now.len());
    }
}
