//! The C calls the library makes, and the real definitions of the calls it
//! wraps.
//!
//! A wrapped call (`write`, `close`, ...) is exported by this library, so a
//! plain `extern "C"` declaration of it would find the wrapper again. The
//! real one is the next definition in the loader's search order after this
//! library, `dlsym(RTLD_NEXT, name)`: glibc's, or another preloaded
//! library's wrapper that in turn calls glibc's. They are looked up once,
//! in the constructor; a hook called before it (from another library's
//! constructor) looks its one call up then.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// `AF_UNIX`.
pub const AF_UNIX: c_int = 1;
/// `SOCK_STREAM`.
pub const SOCK_STREAM: c_int = 1;
/// `SOCK_NONBLOCK | SOCK_CLOEXEC`: flags `socketpair` takes in its type.
pub const SOCK_TYPE_FLAGS: c_int = 0o4000 | 0o2000000;
/// `F_DUPFD`.
pub const F_DUPFD: c_int = 0;
/// `F_GETFL`.
pub const F_GETFL: c_int = 3;
/// `F_DUPFD_CLOEXEC`.
pub const F_DUPFD_CLOEXEC: c_int = 1030;
/// `F_GETPIPE_SZ`: succeeds on pipes and FIFOs only.
pub const F_GETPIPE_SZ: c_int = 1032;
/// `O_ACCMODE`, `O_RDONLY`, `O_WRONLY`.
pub const O_ACCMODE: c_int = 3;
/// `O_RDONLY`.
pub const O_RDONLY: c_int = 0;
/// `O_WRONLY`.
pub const O_WRONLY: c_int = 1;
/// `O_RDWR`.
pub const O_RDWR: c_int = 2;
/// `O_CLOEXEC`.
pub const O_CLOEXEC: c_int = 0o2000000;
/// `CLOSE_RANGE_CLOEXEC`: `close_range` only marks, closes nothing.
pub const CLOSE_RANGE_CLOEXEC: c_int = 4;
/// `ENOSYS`.
pub const ENOSYS: c_int = 38;
/// `SOL_SOCKET`, `SO_TYPE`, `SO_DOMAIN`.
pub const SOL_SOCKET: c_int = 1;
/// `SO_TYPE`.
pub const SO_TYPE: c_int = 3;
/// `SO_DOMAIN`.
pub const SO_DOMAIN: c_int = 39;
/// `PROT_READ | PROT_WRITE`.
pub const PROT_RW: c_int = 3;
/// `SEEK_END`.
pub const SEEK_END: c_int = 2;
/// `MAP_SHARED`.
pub const MAP_SHARED: c_int = 1;

// Calls this library does not wrap: plain declarations reach libc.
extern "C" {
    /// dlsym(3).
    pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    /// The calling thread's `errno`.
    pub fn __errno_location() -> *mut c_int;
    /// getpid(2).
    pub fn getpid() -> c_int;
    /// getenv(3); called only from the constructor.
    pub fn getenv(name: *const c_char) -> *const c_char;
    /// open(2), with its mode; `open` is variadic in C, and the System V
    /// ABI of x86-64 and AArch64 passes the integer arguments of a variadic
    /// call in the registers of a plain one.
    pub fn open(path: *const c_char, flags: c_int, mode: c_int) -> c_int;
    /// mmap(2).
    pub fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    /// lseek(2).
    pub fn lseek(fd: c_int, off: i64, whence: c_int) -> i64;
    /// getsockopt(2).
    pub fn getsockopt(
        fd: c_int,
        level: c_int,
        name: c_int,
        val: *mut c_void,
        len: *mut u32,
    ) -> c_int;
}

/// `RTLD_NEXT`.
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

/// The address of one real call, found on first use.
struct Slot {
    addr: AtomicUsize,
    name: &'static [u8],
}

impl Slot {
    const fn new(name: &'static [u8]) -> Self {
        Slot {
            addr: AtomicUsize::new(0),
            name,
        }
    }

    /// The real call's address, or 0 if not looked up yet.
    #[inline(always)]
    fn known(&self) -> usize {
        // Relaxed: the value is a code address, complete in itself; two
        // threads racing to look it up store the same one.
        self.addr.load(Ordering::Relaxed)
    }

    /// The real call's address, or 0 if the C library has none (an old
    /// glibc's `close_range`).
    fn get(&self) -> usize {
        match self.known() {
            0 => self.resolve(),
            a => a,
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> usize {
        // SAFETY: `name` is a NUL-terminated literal (the macro adds the
        // NUL); dlsym with RTLD_NEXT reads it and returns an address or null.
        let a = unsafe { dlsym(RTLD_NEXT, self.name.as_ptr().cast()) } as usize;
        self.addr.store(a, Ordering::Relaxed);
        a
    }
}

/// Declares each wrapped call's real definition as a function of this
/// module with the same name and C signature. A call the C library lacks
/// fails with `ENOSYS`.
macro_rules! real_calls {
    ($( fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; )*) => {
        #[allow(non_upper_case_globals)]
        mod slots {
            use super::Slot;
            $( pub(super) static $name: Slot = Slot::new(concat!(stringify!($name), "\0").as_bytes()); )*
        }

        /// Looks every real call up now (from the constructor, where
        /// `dlsym` may allocate), so that no hook has to later.
        pub fn resolve_all() {
            $( slots::$name.resolve(); )*
        }

        $(
            /// The real call of this name (the next definition after this
            /// library).
            ///
            /// # Safety
            ///
            /// As for the C call of this name.
            #[inline(always)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                let addr = slots::$name.known();
                if addr == 0 {
                    // Out of line, so that this path needs no stack frame
                    // and the call below stays a tail call.
                    #[cold]
                    #[inline(never)]
                    unsafe fn first_call($($arg: $ty),*) -> $ret {
                        let addr = slots::$name.resolve();
                        if addr == 0 {
                            // SAFETY: the calling thread's errno is a valid int.
                            unsafe { *__errno_location() = ENOSYS };
                            return -1 as $ret;
                        }
                        // SAFETY: `addr` is the C library's definition of
                        // this very call, whose C signature this is.
                        let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { core::mem::transmute(addr) };
                        // SAFETY: the caller keeps the C call's contract.
                        unsafe { f($($arg),*) }
                    }
                    // SAFETY: the caller keeps the C call's contract.
                    return unsafe { first_call($($arg),*) };
                }
                // SAFETY: `addr` is the C library's definition of this
                // very call, whose C signature this is.
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { core::mem::transmute(addr) };
                // SAFETY: the caller keeps the C call's contract.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

real_calls! {
    fn pipe(fds: *mut c_int) -> c_int;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int;
    fn socketpair(domain: c_int, ty: c_int, proto: c_int, fds: *mut c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn close_range(first: u32, last: u32, flags: c_int) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    fn fork() -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    fn readv(fd: c_int, iov: *const c_void, cnt: c_int) -> isize;
    fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: usize, flags: c_int, addr: *mut c_void, alen: *mut u32) -> isize;
    fn recvmsg(fd: c_int, msg: *mut c_void, flags: c_int) -> isize;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn writev(fd: c_int, iov: *const c_void, cnt: c_int) -> isize;
    fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize;
    fn sendto(fd: c_int, buf: *const c_void, n: usize, flags: c_int, addr: *const c_void, alen: u32) -> isize;
    fn sendmsg(fd: c_int, msg: *const c_void, flags: c_int) -> isize;
}

/// Runs `f` and puts `errno` back as it was: for the library's own calls
/// inside a hook, which must not change what the program sees.
pub fn keep_errno<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: the calling thread's errno is a valid int for its lifetime.
    let errno = unsafe { __errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    let r = f();
    // SAFETY: as above.
    unsafe { *errno = saved };
    r
}

static CLOSEFROM: Slot = Slot::new(b"closefrom\0");

/// The real closefrom(3) (glibc 2.34 and later; it returns nothing, so it
/// is not one of `real_calls!`'s). Does nothing where the C library has
/// none, which a program that calls it cannot meet.
///
/// # Safety
///
/// As for closefrom(3).
pub unsafe fn closefrom(low: c_int) {
    let addr = CLOSEFROM.get();
    if addr != 0 {
        // SAFETY: the C library's closefrom, whose signature this is.
        let f: unsafe extern "C" fn(c_int) = unsafe { core::mem::transmute(addr) };
        // SAFETY: the caller keeps closefrom's contract.
        unsafe { f(low) }
    }
}
