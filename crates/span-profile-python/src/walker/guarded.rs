//! Guarded reads of this process's own memory: a plain copy whose faults are caught.
//!
//! Copying interpreter memory with `process_vm_readv` costs a system call per read, and a
//! sample needs many (ADR 0009; `docs/benchmarks.md`, "The Python walker, per sample"). In-process the bytes are right there, but a stale or
//! torn pointer can name unmapped memory, and touching it would kill the host. So the copy is
//! one `rep movsb` instruction at a known address, and a `SIGSEGV`/`SIGBUS` handler that sees a
//! fault at exactly that instruction resumes at a landing pad that returns "fault". Any other
//! fault is passed on unchanged to the handler that was installed before ours (or to the default
//! action), so a real crash elsewhere still crashes and still reaches `faulthandler`.
//!
//! The handler protects a copy only while it is the one installed. Code that installs its own
//! `SIGSEGV` handler later (`faulthandler.enable()` after `start()`, `signal.signal`) would
//! receive our faults, so [`GuardedReader::begin_tick`] checks the installed handlers before
//! each tick and copies through `process_vm_readv` until ours is back. ADR 0009 records the
//! choice and what remains of the risk.
//!
//! Only x86_64 Linux has the guarded copy; elsewhere [`GuardedReader`] always uses the syscall.

use std::cell::Cell;
use std::sync::OnceLock;

use super::memory::{
    scatter_one_by_one, vectored_one_by_one, MemoryReader, ProcessVmReader, ReadError, MAX_READ,
};

/// How a [`GuardedReader`] copies memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// A guarded in-process copy while the fault handler is installed, `process_vm_readv`
    /// otherwise (the default).
    Guarded,
    /// Always `process_vm_readv` (`SPAN_PROFILE_MEMORY_READS=syscall`).
    Syscall,
}

impl ReadMode {
    /// `guarded` or `syscall` (case-insensitive); anything else is an error that says what is
    /// accepted.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "guarded" | "" => Ok(Self::Guarded),
            "syscall" => Ok(Self::Syscall),
            other => Err(format!(
                "SPAN_PROFILE_MEMORY_READS={other:?} is not understood: use `guarded` (the default) or `syscall`"
            )),
        }
    }
}

/// Reads this process's memory with a guarded copy, falling back to `process_vm_readv` whenever
/// the guard is not in place. See the module documentation.
#[derive(Debug)]
pub struct GuardedReader {
    vm: ProcessVmReader,
    /// Whether this tick copies directly (set by [`GuardedReader::begin_tick`]).
    direct: Cell<bool>,
    mode: ReadMode,
}

impl GuardedReader {
    /// A reader of the current process. `process_vm_readv` must work (it is the fallback); with
    /// [`ReadMode::Guarded`] the fault handler is installed once per process.
    pub fn new(mode: ReadMode) -> Result<Self, ReadError> {
        let vm = ProcessVmReader::new()?;
        if mode == ReadMode::Guarded {
            // Whether it worked is checked before every tick (`still_installed`).
            guard::install();
        }
        // Direct copies start with the first tick, on the thread that reads
        // ([`GuardedReader::begin_tick`]); reads during setup use the syscall.
        Ok(Self {
            vm,
            direct: Cell::new(false),
            mode,
        })
    }

    /// Whether reads copy directly right now (false: through `process_vm_readv`).
    pub fn is_direct(&self) -> bool {
        self.direct.get()
    }

    fn direct_read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if addr == 0 || buf.len() > MAX_READ {
            return Err(ReadError::Invalid);
        }
        if buf.is_empty() {
            return Ok(());
        }
        // A range that wraps the address space cannot be mapped.
        if addr.checked_add(buf.len() as u64).is_none() {
            return Err(ReadError::Fault {
                addr,
                len: buf.len(),
            });
        }
        if guard::copy(buf, addr) {
            Ok(())
        } else {
            Err(ReadError::Fault {
                addr,
                len: buf.len(),
            })
        }
    }
}

impl MemoryReader for GuardedReader {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if self.direct.get() {
            self.direct_read(addr, buf)
        } else {
            self.vm.read(addr, buf)
        }
    }

    fn read_pair(
        &self,
        a: u64,
        abuf: &mut [u8],
        b: u64,
        bbuf: &mut [u8],
    ) -> (Result<(), ReadError>, Result<(), ReadError>) {
        if self.direct.get() {
            (self.direct_read(a, abuf), self.direct_read(b, bbuf))
        } else {
            self.vm.read_pair(a, abuf, b, bbuf)
        }
    }

    fn read_scatter(&self, addrs: &[u64], len: usize, out: &mut [u8], ok: &mut [bool]) {
        if self.direct.get() {
            scatter_one_by_one(self, addrs, len, out, ok);
        } else {
            self.vm.read_scatter(addrs, len, out, ok);
        }
    }

    fn read_vectored(&self, reqs: &[(u64, usize)], out: &mut [u8], ok: &mut [bool]) {
        if self.direct.get() {
            vectored_one_by_one(self, reqs, out, ok);
        } else {
            self.vm.read_vectored(reqs, out, ok);
        }
    }

    fn begin_tick(&self) -> bool {
        let direct = self.mode == ReadMode::Guarded
            && guard::still_installed()
            && guard::unblocked_on_this_thread();
        self.direct.set(direct);
        direct
    }
}

/// The guard itself: the copy instruction, its landing pad and the signal handler.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod guard {
    use super::OnceLock;

    // `span_profile_guarded_copy(dst, src, len) -> 0 | 1`. The System V ABI guarantees the
    // direction flag is clear on entry, so `rep movsb` copies forward. A fault inside it leaves
    // the instruction pointer on the `rep movsb` itself (the instruction is restartable), which
    // is how the handler recognises it; the handler then resumes at `_fault`, which returns 1.
    std::arch::global_asm!(
        ".pushsection .text.span_profile_guarded_copy,\"ax\",@progbits",
        ".p2align 4",
        ".globl span_profile_guarded_copy",
        ".hidden span_profile_guarded_copy",
        ".globl span_profile_guarded_copy_insn",
        ".hidden span_profile_guarded_copy_insn",
        ".globl span_profile_guarded_copy_fault",
        ".hidden span_profile_guarded_copy_fault",
        ".type span_profile_guarded_copy,@function",
        "span_profile_guarded_copy:",
        "    mov rcx, rdx",
        "    xor eax, eax",
        "span_profile_guarded_copy_insn:",
        "    rep movsb",
        "    ret",
        "span_profile_guarded_copy_fault:",
        "    mov eax, 1",
        "    ret",
        ".size span_profile_guarded_copy, . - span_profile_guarded_copy",
        ".popsection",
    );

    extern "C" {
        fn span_profile_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> u32;
        static span_profile_guarded_copy_insn: u8;
        static span_profile_guarded_copy_fault: u8;
    }

    /// The address of the copy instruction (only the label's address is taken, never read).
    fn insn_addr() -> usize {
        std::ptr::addr_of!(span_profile_guarded_copy_insn) as usize
    }

    /// The address of the landing pad.
    fn fault_addr() -> usize {
        std::ptr::addr_of!(span_profile_guarded_copy_fault) as usize
    }

    /// Our handler's address, as `sigaction` stores it.
    fn handler_addr() -> usize {
        on_fault as *const () as usize
    }

    /// The handlers that were installed before ours, saved once before ours goes in.
    static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();
    const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

    /// Copies `dst.len()` bytes from `src` into `dst`; false if any of it faulted (then `dst`
    /// holds a prefix of the bytes). The guard must be installed (see `install`).
    pub(super) fn copy(dst: &mut [u8], src: u64) -> bool {
        // SAFETY: (1) `dst` is exclusively borrowed and valid for writes of `dst.len()` bytes;
        // the copy writes exactly that many. (2) `src` may be any address: the copy only reads
        // it, and a fault on that read is turned into a return of 1 by `on_fault`, which the
        // caller installed (`GuardedReader` copies directly only after `install` and
        // `still_installed` said so). (3) The assembly follows the C ABI: it clobbers only rax,
        // rcx, rsi and rdi, all caller-saved.
        unsafe {
            span_profile_guarded_copy(dst.as_mut_ptr(), src as usize as *const u8, dst.len()) == 0
        }
    }

    /// Installs the fault handler for `SIGSEGV` and `SIGBUS`, once per process (whether it took
    /// is what `still_installed` tells).
    pub(super) fn install() {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let mut prev = [empty_action(), empty_action()];
            for (sig, p) in SIGNALS.iter().zip(prev.iter_mut()) {
                // SAFETY: (1) Querying a disposition with a null new action changes nothing;
                // `p` is a valid, exclusively borrowed `sigaction` to write into.
                if unsafe { libc::sigaction(*sig, std::ptr::null(), p) } != 0 {
                    return false;
                }
            }
            // Saved before ours goes in, so the handler always finds them.
            if PREVIOUS.set(prev).is_err() {
                return false;
            }
            let mut ours = empty_action();
            ours.sa_sigaction = handler_addr();
            // SA_ONSTACK: if a previous handler (faulthandler) relies on an alternate stack to
            // report a stack overflow, we run there too and can pass the fault on.
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            // SAFETY: (1) `ours.sa_mask` is a valid `sigset_t` to initialise.
            unsafe { libc::sigemptyset(&mut ours.sa_mask) };
            for sig in SIGNALS {
                // SAFETY: (1) `ours` is a fully initialised action whose handler has the
                // `SA_SIGINFO` signature; the old action is not needed (saved above).
                if unsafe { libc::sigaction(sig, &ours, std::ptr::null_mut()) } != 0 {
                    return false;
                }
            }
            true
        });
    }

    /// Whether our handler is still the installed one for both signals (someone may have
    /// replaced it since `install`). Two system calls.
    pub(super) fn still_installed() -> bool {
        if PREVIOUS.get().is_none() {
            return false;
        }
        SIGNALS.iter().all(|&sig| {
            let mut cur = empty_action();
            // SAFETY: (1) A query with a null new action; `cur` is valid to write into.
            let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) };
            rc == 0 && cur.sa_sigaction == handler_addr()
        })
    }

    /// Makes sure `SIGSEGV` and `SIGBUS` are not blocked on the calling thread (once per
    /// thread); true if they are not. A thread inherits its creator's mask, and a fault that
    /// arrives blocked is not handled: the kernel unblocks it, resets it to the default action
    /// and kills the process. Hosts that block every signal in their worker threads exist.
    pub(super) fn unblocked_on_this_thread() -> bool {
        thread_local! {
            static UNBLOCKED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
        }
        UNBLOCKED.with(|u| {
            if let Some(done) = u.get() {
                return done;
            }
            let mut set = empty_sigset();
            // SAFETY: (1) `set` is a valid, exclusively borrowed `sigset_t`; the calls only
            // initialise it and add two valid signal numbers. (2) `pthread_sigmask` changes the
            // calling thread's mask only; the old mask is not needed.
            let ok = unsafe {
                libc::sigemptyset(&mut set) == 0
                    && libc::sigaddset(&mut set, libc::SIGSEGV) == 0
                    && libc::sigaddset(&mut set, libc::SIGBUS) == 0
                    && libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) == 0
            };
            u.set(Some(ok));
            ok
        })
    }

    fn empty_sigset() -> libc::sigset_t {
        // SAFETY: (1) `sigset_t` is a plain C bit set; all-zero bytes is a valid (empty) value,
        // and `sigemptyset` initialises it properly before use.
        unsafe { std::mem::zeroed() }
    }

    fn empty_action() -> libc::sigaction {
        // SAFETY: (1) `sigaction` is a plain C struct for which all-zero bytes is a valid value
        // (SIG_DFL, no flags, an empty mask).
        unsafe { std::mem::zeroed() }
    }

    /// The signal handler. Async-signal-safe: it reads the saved context and a `OnceLock`
    /// (an atomic load), and calls only `sigaction` and the previous handler.
    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: (1) The kernel passes a valid `siginfo_t` and `ucontext_t` to an SA_SIGINFO
        // handler; both are checked for null anyway. (2) A positive `si_code` means the kernel
        // raised the signal for a fault (a `kill` or `raise` has `si_code <= 0`), and the saved
        // instruction pointer equal to our copy instruction means the fault is one of our
        // reads: resuming at the landing pad, which returns 1 under the same ABI state, is
        // exactly the "faulted" outcome `copy` documents.
        unsafe {
            if !info.is_null() && !ctx.is_null() && (*info).si_code > 0 {
                let uc = ctx.cast::<libc::ucontext_t>();
                let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
                if *rip as usize == insn_addr() {
                    *rip = fault_addr() as libc::greg_t;
                    return;
                }
            }
            pass_on(sig, info, ctx);
        }
    }

    /// Hands a fault that is not ours to the handler that was installed before ours: called
    /// directly if it is a function; otherwise (default or ignore) that disposition is restored
    /// and the handler returns, so the faulting instruction runs again under it.
    ///
    /// # Safety
    /// Only from `on_fault`, with the arguments the kernel passed it.
    unsafe fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let idx = usize::from(sig == libc::SIGBUS);
        let Some(prev) = PREVIOUS.get().and_then(|p| p.get(idx)) else {
            return;
        };
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            // SAFETY: (1) `info` is the kernel's, checked for null.
            let fault = !info.is_null() && unsafe { (*info).si_code } > 0;
            if fault {
                // A fault: put the old disposition back and return, so the instruction faults
                // again under it (the kernel kills for an ignored fault too).
                // SAFETY: (1) Restores a disposition saved from the kernel itself.
                unsafe { libc::sigaction(sig, prev, std::ptr::null_mut()) };
            } else if h == libc::SIG_DFL {
                // Sent by `kill` or `raise`: there is nothing to run again, so deliver it anew
                // under the default action (which ends the process).
                // SAFETY: (1) As above; `raise` is async-signal-safe, and with SA_NODEFER the
                // signal is not blocked here.
                unsafe {
                    libc::sigaction(sig, prev, std::ptr::null_mut());
                    libc::raise(sig);
                }
            }
            // Sent and ignored: nothing to do, and our handler stays.
            return;
        }
        if prev.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: (1) The saved handler was installed with SA_SIGINFO, so it has this
            // signature; it receives the kernel's own arguments.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        } else {
            // SAFETY: (1) Without SA_SIGINFO a handler takes only the signal number.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }
}

/// Elsewhere there is no guarded copy: every read goes through `process_vm_readv`.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod guard {
    pub(super) fn copy(_dst: &mut [u8], _src: u64) -> bool {
        false
    }
    pub(super) fn install() {}
    pub(super) fn still_installed() -> bool {
        false
    }
    pub(super) fn unblocked_on_this_thread() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walker::memory::ReadExt;
    use crate::walker::testing::forbidden_page;

    /// Two pages, readable then forbidden: returns the readable one.
    fn readable_then_forbidden() -> u64 {
        // SAFETY: (1) An anonymous private mapping of two pages with no address hint; the
        // result is checked. (2) `mprotect` changes only the second page of that mapping, which
        // stays reserved (leaked) for the rest of the test process.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let second = p.cast::<u8>().add(4096).cast();
            assert_eq!(libc::mprotect(second, 4096, libc::PROT_NONE), 0);
            p as u64
        }
    }

    #[test]
    fn guarded_reads_copy_mapped_memory_and_report_unmapped_memory() {
        let r = GuardedReader::new(ReadMode::Guarded).expect("reader");
        r.begin_tick();
        assert!(r.is_direct(), "the guard is installed in a test binary");
        let v: Vec<u64> = (0..512).collect();
        let base = v.as_ptr() as u64;
        assert_eq!(r.read_u64(base + 8 * 300).unwrap(), 300);
        let gone = forbidden_page();
        assert!(matches!(r.read_u64(gone), Err(ReadError::Fault { .. })));
        assert!(matches!(r.read_u64(8), Err(ReadError::Fault { .. })));
        assert!(matches!(
            r.read_u64(u64::MAX - 3),
            Err(ReadError::Fault { .. })
        ));
        assert_eq!(r.read_u64(0), Err(ReadError::Invalid));
        // A read that starts mapped and runs into an unmapped page faults as a whole.
        let edge = readable_then_forbidden();
        let mut buf = [0u8; 200];
        assert!(r.read(edge + 4000, &mut buf[..96]).is_ok());
        assert!(matches!(
            r.read(edge + 4000, &mut buf),
            Err(ReadError::Fault { .. })
        ));
        // Scatter and pair keep each read's own result.
        let addrs = [base, gone, base + 16, 8];
        let mut out = [0u8; 32];
        let mut ok = [false; 4];
        r.read_scatter(&addrs, 8, &mut out, &mut ok);
        assert_eq!(ok, [true, false, true, false]);
        assert_eq!(u64::from_le_bytes(out[16..24].try_into().unwrap()), 2);
        let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
        let (ra, rb) = r.read_pair(gone, &mut a, base + 8, &mut b);
        assert!(ra.is_err());
        assert_eq!(rb, Ok(()));
        assert_eq!(u64::from_le_bytes(b), 1);
    }

    #[test]
    fn a_thousand_faults_in_a_row_are_all_caught() {
        let r = GuardedReader::new(ReadMode::Guarded).expect("reader");
        r.begin_tick();
        let gone = forbidden_page();
        for i in 0..1000u64 {
            assert!(r.read_u64(gone + (i % 512) * 8).is_err());
        }
    }

    #[test]
    fn syscall_mode_never_copies_directly() {
        let r = GuardedReader::new(ReadMode::Syscall).expect("reader");
        r.begin_tick();
        assert!(!r.is_direct());
        let x = 42u64;
        assert_eq!(r.read_u64(std::ptr::addr_of!(x) as u64).unwrap(), 42);
        assert!(r.read_u64(forbidden_page()).is_err());
    }

    #[test]
    fn modes_parse_and_bad_values_say_what_is_accepted() {
        assert_eq!(ReadMode::parse("guarded"), Ok(ReadMode::Guarded));
        assert_eq!(ReadMode::parse(" SYSCALL "), Ok(ReadMode::Syscall));
        let e = ReadMode::parse("mmap").unwrap_err();
        assert!(e.contains("`guarded`") && e.contains("`syscall`"), "{e}");
    }
}
