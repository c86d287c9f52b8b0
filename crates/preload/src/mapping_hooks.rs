//! The wrappers of the calls that change the program's mappings (`mmap`,
//! `mmap64`, `munmap`, `mremap`, `mprotect`, `pkey_mprotect`, `madvise`,
//! `shmat`): each tells `main_stack` of the range it touches, so that a
//! program that changes its own stack's mappings gets the kernel's
//! `EFAULT` as natively. Nothing else changes: each calls the real call.
//!
//! An allocator calls `mmap` through the PLT while it starts, perhaps in
//! a constructor that runs before this library's, and looking the real
//! call up then (`dlsym`) may allocate. So before the constructor has
//! looked a call up, its wrapper makes the system call itself.

use core::ffi::{c_int, c_void};

use crate::{main_stack, sys};

/// `MAP_FIXED`: the address given is the address taken.
const MAP_FIXED: c_int = 0x10;
/// `MREMAP_FIXED`: the same, for `mremap`'s fifth argument.
const MREMAP_FIXED: c_int = 2;

/// A system call's arguments, padded with zeros to six.
fn six<const N: usize>(given: [usize; N]) -> [usize; 6] {
    let mut all = [0; 6];
    all[..N].copy_from_slice(&given);
    all
}

/// Defines the wrapper of a call that changes mappings in place: a range
/// over the main stack's room ends `main_stack`'s shortcut before the
/// change is made.
macro_rules! in_place_hook {
    ($( $man:literal fn $name:ident / $nr:ident ($addr:ident: *mut c_void, $len:ident: usize $(, $arg:ident: $ty:ty)*); )*) => {$(
        #[doc = concat!($man, ": tells `main_stack` first.")]
        ///
        /// # Safety
        ///
        #[doc = concat!("As for ", $man, ".")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($addr: *mut c_void, $len: usize $(, $arg: $ty)*) -> c_int {
            main_stack::changing($addr, $len);
            if sys::known::$name() {
                // SAFETY: the caller's contract is the C call's.
                unsafe { sys::$name($addr, $len $(, $arg)*) }
            } else {
                let args = six([$addr as usize, $len $(, $arg as usize)*]);
                // SAFETY: as above; the system call of the same name.
                unsafe { sys::raw(sys::nr::$nr, args) as c_int }
            }
        }
    )*};
}

in_place_hook! {
    "munmap(2)" fn munmap / MUNMAP(addr: *mut c_void, len: usize);
    "mprotect(2)" fn mprotect / MPROTECT(addr: *mut c_void, len: usize, prot: c_int);
    "pkey_mprotect(2)" fn pkey_mprotect / PKEY_MPROTECT(addr: *mut c_void, len: usize, prot: c_int, pkey: c_int);
    "madvise(2)" fn madvise / MADVISE(addr: *mut c_void, len: usize, advice: c_int);
}

/// Defines the wrapper of a call that makes a mapping: one placed over the
/// main stack's room (by `MAP_FIXED`, or at a hint the kernel took) ends
/// `main_stack`'s shortcut.
macro_rules! map_hook {
    ($( $man:literal fn $name:ident; )*) => {$(
        #[doc = concat!($man, ": tells `main_stack` of where it maps.")]
        ///
        /// # Safety
        ///
        #[doc = concat!("As for ", $man, ".")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: i64,
        ) -> *mut c_void {
            if flags & MAP_FIXED != 0 {
                main_stack::changing(addr, len);
            }
            let r = if sys::known::$name() {
                // SAFETY: the caller's contract is the C call's.
                unsafe { sys::$name(addr, len, prot, flags, fd, off) }
            } else {
                let args = [addr as usize, len, prot as usize, flags as usize, fd as usize, off as usize];
                // SAFETY: as above; mmap(2) itself.
                unsafe { sys::raw(sys::nr::MMAP, args) as *mut c_void }
            };
            if r != sys::MAP_FAILED {
                main_stack::changing(r, len);
            }
            r
        }
    )*};
}

map_hook! {
    "mmap(2)" fn mmap;
    "mmap64(3), `mmap` with a 64-bit offset (the same call here)" fn mmap64;
}

/// mremap(2): tells `main_stack` of the range it leaves and the one it
/// takes. (Variadic in C: the new address is read only with
/// `MREMAP_FIXED`, passed in the register of a fifth argument.)
///
/// # Safety
///
/// As for mremap(2).
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    len: usize,
    flags: c_int,
    new: *mut c_void,
) -> *mut c_void {
    remapping(old, old_len, len, flags, new);
    let r = if sys::known::mremap() {
        // SAFETY: the caller's contract is mremap(2)'s.
        unsafe { sys::mremap(old, old_len, len, flags, new) }
    } else {
        let args = [old as usize, old_len, len, flags as usize, new as usize, 0];
        // SAFETY: as above; mremap(2) itself.
        unsafe { sys::raw(sys::nr::MREMAP, args) as *mut c_void }
    };
    remapped(r, len)
}

/// Before `mremap(old, old_len, len, flags, new)`: tells `main_stack` of
/// the range it leaves and of the one `MREMAP_FIXED` takes.
pub(crate) fn remapping(
    old: *mut c_void,
    old_len: usize,
    len: usize,
    flags: c_int,
    new: *mut c_void,
) {
    main_stack::changing(old, old_len);
    if flags & MREMAP_FIXED != 0 {
        main_stack::changing(new, len);
    }
}

/// After `mremap` returned `r` for a new length `len`: tells `main_stack`
/// of the range taken, if any; returns `r`.
pub(crate) fn remapped(r: *mut c_void, len: usize) -> *mut c_void {
    if r != sys::MAP_FAILED {
        main_stack::changing(r, len);
    }
    r
}

/// shmat(2): an attach at an address the program chose (perhaps over its
/// stack, with `SHM_REMAP`) ends `main_stack`'s shortcut, wherever it is:
/// the segment's size is not known here, and `SHM_RND` rounds the
/// address down. A rare call; the shortcut only saves time.
///
/// # Safety
///
/// As for shmat(2).
#[no_mangle]
pub unsafe extern "C" fn shmat(id: c_int, addr: *const c_void, flags: c_int) -> *mut c_void {
    if !addr.is_null() {
        main_stack::changing(core::ptr::null(), usize::MAX);
    }
    if sys::known::shmat() {
        // SAFETY: the caller's contract is shmat(2)'s.
        unsafe { sys::shmat(id, addr, flags) }
    } else {
        let args = [id as usize, addr as usize, flags as usize, 0, 0, 0];
        // SAFETY: as above; shmat(2) itself.
        unsafe { sys::raw(sys::nr::SHMAT, args) as *mut c_void }
    }
}
