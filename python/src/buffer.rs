//! Raw access to the memory of Python objects: the bytes a message is
//! sent from (any buffer-protocol object, read in place, no extra copy)
//! and the memory it is received into (a new `bytes`, or a caller's
//! writable buffer). The pointers cross into code that runs with the GIL
//! released, so they are wrapped in types that say why that is sound.

use std::mem::MaybeUninit;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use shmpipe::RingSlice;

/// Bytes to send, borrowed from a Python object that the holder keeps
/// alive (and, for a buffer, exported) while this lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Src {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the memory belongs to a Python object whose buffer export (or,
// for `bytes`, whose reference) the caller holds for as long as the Src is
// used; the export keeps the memory in place whichever thread reads it.
unsafe impl Send for Src {}

impl Src {
    /// The whole source.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `len` bytes at `offset`, as a new source.
    pub(crate) fn sub(&self, offset: usize, len: usize) -> Src {
        assert!(offset + len <= self.len, "Src::sub out of range");
        Src {
            // SAFETY: in range, checked above.
            ptr: unsafe { self.ptr.add(offset) },
            len,
        }
    }

    /// Copies `dst.len()` bytes from `offset` into `dst` (ring memory of
    /// ours).
    pub(crate) fn copy_to(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "Src::copy_to out of range");
        // SAFETY: the source range is inside the exported buffer (checked
        // above), readable while the export lives; `dst` is our own ring
        // memory and cannot overlap a Python object's. Another Python
        // thread writing the buffer meanwhile races as it would with
        // `os.write`; we never form a reference to it.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), dst.as_mut_ptr(), dst.len()) }
    }
}

/// A buffer-protocol object's bytes, held exported while this lives.
pub(crate) enum Held<'py> {
    /// A `bytes` object: immutable, no export needed.
    Bytes(Bound<'py, PyBytes>),
    /// Anything else with the buffer protocol.
    Buffer(PyUntypedBuffer),
}

impl std::fmt::Debug for Held<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

impl<'py> Held<'py> {
    /// Exports `obj`'s bytes: `bytes` directly, anything else through the
    /// buffer protocol, which must give C-contiguous memory.
    pub(crate) fn new(obj: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
        if let Ok(b) = obj.cast_exact::<PyBytes>() {
            return Ok(Held::Bytes(b.clone()));
        }
        let buf = PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "a bytes-like object is required, not '{}'",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        if !buf.is_c_contiguous() {
            return Err(PyBufferError::new_err(
                "shmpipe: the buffer is not C-contiguous",
            ));
        }
        Ok(Held::Buffer(buf))
    }

    /// The bytes, read in place.
    pub(crate) fn src(&self) -> Src {
        match self {
            Held::Bytes(b) => {
                let s = b.as_bytes();
                Src {
                    ptr: s.as_ptr(),
                    len: s.len(),
                }
            }
            Held::Buffer(b) => Src {
                ptr: b.buf_ptr() as *const u8,
                len: b.len_bytes(),
            },
        }
    }

    /// The bytes as a writable destination (for `recv_bytes_into`).
    pub(crate) fn dst(&self) -> PyResult<Dst> {
        match self {
            Held::Buffer(b) if !b.readonly() => Ok(Dst {
                ptr: b.buf_ptr() as *mut u8,
                len: b.len_bytes(),
            }),
            _ => Err(PyTypeError::new_err(
                "shmpipe: recv_bytes_into needs a writable buffer",
            )),
        }
    }
}

/// Memory to receive into: a new `bytes` not yet seen by Python code, or
/// a caller's writable buffer held exported.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dst {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: as for `Src`: the memory stays in place while the holder keeps
// the object (and its export); only the thread holding the Dst writes it
// through us.
unsafe impl Send for Dst {}

impl Dst {
    /// The destination's length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies the first `n` bytes of a ring message to `offset`.
    pub(crate) fn fill(&mut self, offset: usize, msg: RingSlice<'_>, n: usize) {
        assert!(offset + n <= self.len, "Dst::fill out of range");
        // SAFETY: the range is inside the destination (checked above),
        // held alive by the caller, and nothing else of ours refers to it
        // while this slice lives; viewed as possibly uninitialised bytes
        // (a new `bytes` is), it is only written.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.ptr.add(offset).cast::<MaybeUninit<u8>>(), n)
        };
        msg.copy_to_uninit(dst);
    }
}

/// A new `bytes` of `len` bytes and its memory, uninitialised: to be
/// filled (by `Dst::fill`) before any Python code sees it.
pub(crate) fn new_bytes(py: Python<'_>, len: usize) -> PyResult<(Bound<'_, PyBytes>, Dst)> {
    let size = ffi::Py_ssize_t::try_from(len)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("message too large"))?;
    // SAFETY: PyBytes_FromStringAndSize with a null pointer allocates an
    // uninitialised bytes object of `size` bytes (or fails with an
    // exception set, turned into a PyErr by assume_owned_or_err).
    let obj = unsafe {
        Bound::from_owned_ptr_or_err(py, ffi::PyBytes_FromStringAndSize(std::ptr::null(), size))?
            .cast_into_unchecked::<PyBytes>()
    };
    // SAFETY: `obj` is a bytes object, so this is its data pointer, valid
    // for `len` bytes while `obj` lives.
    let ptr = unsafe { ffi::PyBytes_AsString(obj.as_ptr()).cast::<u8>() };
    Ok((obj, Dst { ptr, len }))
}
