//! The model of a service trait that the parser builds and the client and
//! server generators read: its methods, each with its opcode, parameters
//! and result, each of those with the way it travels.

use proc_macro2::{Ident, TokenStream as Tokens};
use quote::quote;
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

/// A method's parameter (the receiver aside).
pub(crate) struct Param {
    pub(crate) name: Ident,
    pub(crate) ty: Type,
    pub(crate) kind: Kind,
}

/// A method of the trait: its opcode is its place in the trait.
pub(crate) struct Method {
    pub(crate) name: Ident,
    pub(crate) op: u16,
    pub(crate) params: Vec<Param>,
    /// The result type as written (`()` when none is).
    pub(crate) ret: Type,
    pub(crate) ret_kind: Kind,
    /// The method's `///` lines, repeated on the client's method.
    pub(crate) docs: Vec<syn::Attribute>,
}

impl Method {
    /// `name: Type` for each parameter, as the trait declares them.
    pub(crate) fn typed_params(&self) -> Vec<Tokens> {
        self.params
            .iter()
            .map(|p| {
                let n = &p.name;
                let t = &p.ty;
                quote!(#n: #t)
            })
            .collect()
    }

    /// Each parameter's name, in order.
    pub(crate) fn param_names(&self) -> Vec<&Ident> {
        self.params.iter().map(|p| &p.name).collect()
    }

    /// The `&mut [u8]` parameters, which the reply fills.
    pub(crate) fn out_params(&self) -> impl Iterator<Item = &Param> {
        self.params
            .iter()
            .filter(|p| matches!(p.kind, Kind::BytesOut))
    }
}

/// A service trait, read and checked.
pub(crate) struct Service {
    /// The trait as written: emitted unchanged beside what is generated.
    pub(crate) item: ItemTrait,
    pub(crate) methods: Vec<Method>,
    /// A hash of the trait's name and its methods' signatures.
    pub(crate) id: u64,
    /// The `version` option.
    pub(crate) version: u32,
    /// The `max_frame` option.
    pub(crate) max_frame: u32,
    /// The path the generated code names everything by: the `__private`
    /// module of the RPC runtime (the `crate` option, `::shmpipe::rpc` by
    /// default).
    pub(crate) rt: Tokens,
}

impl Service {
    /// The `Interface` value both halves declare (the client checks it at
    /// connect, the server answers the hello with it).
    pub(crate) fn interface(&self) -> Tokens {
        let rt = &self.rt;
        let name = self.item.ident.to_string();
        let (id, version, max_frame) = (self.id, self.version, self.max_frame);
        quote! {
            #rt::Interface {
                name: #name,
                id: #id,
                version: #version,
                max_frame: #max_frame,
            }
        }
    }
}
