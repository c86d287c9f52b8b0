//! `shmpipe._shmpipe`: shmpipe's message pipes as connection objects shaped
//! like `multiprocessing.connection.Connection`.
//!
//! The pure-Python package `shmpipe` (in `../shmpipe/`) builds `Pipe`,
//! `Listener`, `Client` and the pickling `multiprocessing` needs on top of
//! this module. Pieces, each with one job:
//!
//! * [`connection`]: the `Connection` class;
//! * [`framing`]: how a message of any size crosses a ring (the one
//!   cross-process format this crate adds);
//! * [`ring_io`]: one ring message at a time, with the waits around it;
//! * [`blocking`]: waiting with the GIL released, in slices that let
//!   Ctrl-C through;
//! * [`buffer`]: raw access to buffer-protocol objects and new `bytes`;
//! * [`fds`]: rebuilding an end from descriptors another process sent;
//! * [`listener`]: `Listener` and `client`;
//! * [`pending`]: a client's connection until the listener accepts it.
//!
//! Unsafe code lives in `buffer` and `fds` only.

#![deny(unsafe_code)]

mod blocking;
#[allow(unsafe_code)]
mod buffer;
mod connection;
mod errors;
#[allow(unsafe_code)]
mod fds;
mod framing;
mod listener;
mod pending;
mod ring_io;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
#[pyo3(name = "_shmpipe")]
fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<connection::Connection>()?;
    m.add_class::<listener::Listener>()?;
    m.add_function(wrap_pyfunction!(connection::pipe, m)?)?;
    m.add_function(wrap_pyfunction!(listener::client, m)?)?;
    m.add("DEFAULT_CAPACITY", connection::DEFAULT_CAPACITY)?;
    m.add("MIN_CAPACITY", framing::MIN_CAPACITY)?;
    Ok(())
}
