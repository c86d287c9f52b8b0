//! The shared memory of a ring: a memfd, its seals, and a shared mapping
//! of it. Our own regions are made here, sealed against resizing so that
//! a mapping of them can never fault with SIGBUS; a peer's are checked
//! here (a sealed tmpfs memfd) before we map them.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

use crate::error;

/// Seals every shared region carries: its size can never change, so a
/// mapping of it can never fault with SIGBUS, and no seal can be removed.
pub(crate) const SIZE_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// `memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)` and `ftruncate`,
/// see [memfd_create(2)](https://man7.org/linux/man-pages/man2/memfd_create.2.html): a memfd of `len`
/// zero bytes, close-on-exec, sealable, nameless in the filesystem
/// (nothing under /dev/shm).
pub(crate) fn memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    Ok(fd)
}

/// `fcntl(fd, F_ADD_SEALS, seals)`, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html): adds seals to a memfd.
pub(crate) fn seal(fd: BorrowedFd<'_>, seals: SealFlags) -> io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(fd, seals)?)
}

/// `TMPFS_MAGIC` from `<linux/magic.h>`: the filesystem of an ordinary
/// memfd (shmem).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// `fcntl(F_GET_SEALS)`, then `fstatfs` and `fstat`, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html) and
/// [fstatfs(2)](https://man7.org/linux/man-pages/man2/fstatfs.2.html):
/// checks that a memfd we did not create is sealed against resizing and
/// lives on tmpfs, and returns its size. Anything else (no memfd,
/// unsealed, a hugetlbfs memfd) is `InvalidData`.
///
/// Why tmpfs only: a hugetlbfs memfd (`MFD_HUGETLB`) takes the same seals,
/// but a mapping of it is rounded to the huge page size (our `munmap` of
/// the length we asked for then fails, leaking the mapping), and its owner
/// can still punch holes in it despite the seals, so our next load from
/// its index would raise SIGBUS.
pub(crate) fn check_sealed(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // F_GET_SEALS first: it fails at once on anything but a memfd (or a
    // tmpfs/hugetlbfs file) without calling into the file's filesystem,
    // where fstatfs or fstat on a FUSE file the peer serves could block
    // us for as long as it likes.
    let seals = check_memfd(fd)?;
    let fs = rustix::fs::fstatfs(fd)?;
    if fs.f_type as i64 != TMPFS_MAGIC {
        return Err(error::invalid_data(format!(
            "peer's region is not a tmpfs memfd (filesystem {:#x})",
            fs.f_type
        )));
    }
    if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
        return Err(error::invalid_data(
            "peer's region is not sealed against resizing",
        ));
    }
    let size = rustix::fs::fstat(fd)?.st_size;
    usize::try_from(size).map_err(|_| error::invalid_data("peer's region has a bad size"))
}

/// `fcntl(fd, F_GET_SEALS)`, see [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html):
/// the seals of a descriptor from the peer, `InvalidData` if it is not a
/// sealable memfd. The first look at such a descriptor: it never calls
/// into a filesystem the peer may control (FUSE), as `fstat` would.
pub(crate) fn check_memfd(fd: BorrowedFd<'_>) -> io::Result<SealFlags> {
    rustix::fs::fcntl_get_seals(fd)
        .map_err(|e| error::invalid_data(format!("peer's region is not a sealable memfd ({e})")))
}

/// `fcntl(fd, F_GET_SEALS)`, see [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html): the
/// seals on a memfd.
pub(crate) fn seals(fd: BorrowedFd<'_>) -> io::Result<SealFlags> {
    Ok(rustix::fs::fcntl_get_seals(fd)?)
}

/// A shared mapping of a whole memfd, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is an address range; it is only read and written
// through atomics or raw copies by the ring, which keeps its own rules.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `mmap(NULL, len, PROT_READ [| PROT_WRITE], MAP_SHARED, fd, 0)`, see
    /// [mmap(2)](https://man7.org/linux/man-pages/man2/mmap.2.html): maps `len` bytes of `fd` shared,
    /// writable or read-only; `munmap` on drop.
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Mapping> {
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a fresh mapping at an address the kernel chooses aliases
        // no Rust object; the memfd cannot shrink under it (we create or
        // check it sealed), so every byte of it stays accessible.
        let ptr =
            unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0)? };
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// `mprotect(ptr, len, PROT_READ | PROT_WRITE)`, see
    /// [mprotect(2)](https://man7.org/linux/man-pages/man2/mprotect.2.html):
    /// makes the first `len` bytes (a whole number of pages) writable.
    /// Fails (`EACCES`) on a memfd sealed against writable mappings.
    pub(crate) fn make_writable(&self, len: usize) -> io::Result<()> {
        assert!(len <= self.len && len % rustix::param::page_size() == 0);
        // SAFETY: the range is inside our own mapping (checked above);
        // giving it write permission changes no byte and moves nothing.
        unsafe {
            rustix::mm::mprotect(
                self.ptr.as_ptr().cast(),
                len,
                MprotectFlags::READ | MprotectFlags::WRITE,
            )?
        };
        Ok(())
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and nothing uses
        // the range after the Mapping (its owners hold it in an Arc that
        // outlives every ring end built on it).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
