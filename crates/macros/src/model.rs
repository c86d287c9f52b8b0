//! The model of a service trait that the parser builds and the client and
//! server generators read: its methods, each with its opcode, parameters
//! and result, each of those with the way it travels.

use proc_macro2::{Ident, TokenStream as Tokens};
use syn::{ItemTrait, Type};

/// How a type travels.
#[derive(Clone)]
pub(crate) enum Kind {
    /// Plain data: its bytes, fixed size.
    Fixed(Box<Type>),
    /// `&[u8]` in.
    BytesIn,
    /// `&str` in.
    StrIn,
    /// `&mut [u8]`: a length goes, the bytes come back.
    BytesOut,
    /// `Vec<u8>`.
    Vec,
    /// `String`.
    Str,
    /// `()`.
    Unit,
    /// `Result<T, E>`.
    Result(Box<Kind>, Box<Kind>),
}

pub(crate) struct Param {
    pub(crate) name: Ident,
    pub(crate) ty: Type,
    pub(crate) kind: Kind,
}

pub(crate) struct Method {
    pub(crate) name: Ident,
    pub(crate) op: u16,
    pub(crate) params: Vec<Param>,
    pub(crate) ret: Type,
    pub(crate) ret_kind: Kind,
}

pub(crate) struct Service {
    pub(crate) item: ItemTrait,
    pub(crate) methods: Vec<Method>,
    pub(crate) id: u64,
    pub(crate) version: u32,
    pub(crate) max_frame: u32,
    pub(crate) rt: Tokens,
}
