//! The attribute's input read into the model: its options ([`Args`]) and
//! the trait, each method checked and each type classified by its
//! spelling.

use proc_macro2::TokenStream as Tokens;
use quote::{quote, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    FnArg, GenericArgument, ItemTrait, LitInt, Pat, PathArguments, ReturnType, Token, TraitItem,
    Type,
};

use crate::model::{Kind, Method, Param, Service};

/// The attribute's options.
pub(crate) struct Args {
    version: u32,
    max_frame: u32,
    /// The runtime's path: `crate = ::shmpipe_rpc`.
    runtime: Tokens,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut a = Args {
            version: 1,
            max_frame: 1 << 20,
            runtime: quote!(::shmpipe::rpc),
        };
        let mut errors = Errors::default();
        let list = Punctuated::<syn::MetaNameValue, Token![,]>::parse_terminated(input)?;
        for kv in list {
            if kv.path.is_ident("crate") {
                let path = syn::parse2::<syn::Path>(kv.value.to_token_stream()).map_err(|_| {
                    syn::Error::new(
                        kv.value.span(),
                        "shmpipe::service: `crate` takes a path, such as `::shmpipe_rpc`",
                    )
                });
                if let Some(path) = errors.keep(path) {
                    a.runtime = path.to_token_stream();
                }
            } else if kv.path.is_ident("version") {
                if let Some(v) = errors.keep(integer(&kv)) {
                    a.version = v;
                }
            } else if kv.path.is_ident("max_frame") {
                if let Some(v) = errors.keep(integer(&kv)) {
                    a.max_frame = v;
                }
            } else {
                let name = kv.path.to_token_stream().to_string().replace(' ', "");
                errors.push(syn::Error::new(
                    kv.path.span(),
                    format!(
                        "shmpipe::service: unknown option `{name}`; \
                         the options are `version = N`, `max_frame = BYTES` and `crate = PATH`"
                    ),
                ));
            }
        }
        errors.finish(a)
    }
}

/// An option's value as a `u32` literal.
fn integer(kv: &syn::MetaNameValue) -> syn::Result<u32> {
    let name = kv.path.to_token_stream().to_string();
    let not_u32 = || {
        syn::Error::new(
            kv.value.span(),
            format!("shmpipe::service: `{name}` takes a whole number that fits in a u32"),
        )
    };
    let lit: LitInt = syn::parse2(kv.value.to_token_stream()).map_err(|_| not_u32())?;
    lit.base10_parse().map_err(|_| not_u32())
}

/// Errors gathered so that one expansion reports them all, each at its
/// own tokens.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    /// The value of `r`, or `None` with its error kept.
    fn keep<T>(&mut self, r: syn::Result<T>) -> Option<T> {
        r.map_err(|e| self.push(e)).ok()
    }

    /// The errors kept, when one was sure to be.
    fn into_error(self) -> syn::Error {
        self.0.expect("a part that failed kept its error")
    }

    /// `v` if no error was kept.
    fn finish<T>(self, v: T) -> syn::Result<T> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(v),
        }
    }
}

/// `[u8]`, however spaced.
fn is_u8_slice(t: &Type) -> bool {
    matches!(t, Type::Slice(s) if quote!(#s).to_string().replace(' ', "") == "[u8]")
}

/// The last segment of a plain path type: `Vec<u8>` of `std::vec::Vec<u8>`.
fn last_segment(t: &Type) -> Option<&syn::PathSegment> {
    match t {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

/// The type arguments of a path segment: `[u8]` of `Vec<u8>`.
fn generic_args(seg: &syn::PathSegment) -> Vec<&Type> {
    match &seg.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// How a parameter or result of type `t` travels, decided by its
/// spelling; `result_ok` if it may be a `Result` (a method's result).
fn classify(t: &Type, result_ok: bool) -> syn::Result<Kind> {
    match t {
        Type::Reference(r) => {
            let inner = &*r.elem;
            if is_u8_slice(inner) {
                return Ok(if r.mutability.is_some() {
                    Kind::BytesOut
                } else {
                    Kind::BytesIn
                });
            }
            if r.mutability.is_none() && quote!(#inner).to_string() == "str" {
                return Ok(Kind::StrIn);
            }
            Err(syn::Error::new(
                t.span(),
                "shmpipe::service: references must be `&[u8]`, `&str` or `&mut [u8]`",
            ))
        }
        Type::Tuple(tu) if tu.elems.is_empty() => Ok(Kind::Unit),
        Type::Paren(p) => classify(&p.elem, result_ok),
        _ => {
            if let Some(seg) = last_segment(t) {
                let name = seg.ident.to_string();
                let args = generic_args(seg);
                if name == "String" && args.is_empty() {
                    return Ok(Kind::Str);
                }
                if name == "Vec" && args.len() == 1 && quote!(#(#args)*).to_string() == "u8" {
                    return Ok(Kind::Vec);
                }
                if name == "Result" && args.len() == 2 {
                    if !result_ok {
                        return Err(syn::Error::new(
                            t.span(),
                            "shmpipe::service: `Result` only as a method's result \
                             (not as a parameter, nor inside another `Result`)",
                        ));
                    }
                    let ok = classify(args[0], false)?;
                    let err = classify(args[1], false)?;
                    return Ok(Kind::Result(Box::new(ok), Box::new(err)));
                }
            }
            Ok(Kind::Fixed(Box::new(t.clone())))
        }
    }
}

/// The model of the trait `tr`, checked: what the attribute cannot turn
/// into stubs is an error at the offending tokens (every such error, not
/// only the first).
pub(crate) fn service(args: Args, tr: ItemTrait) -> syn::Result<Service> {
    let mut errors = Errors::default();
    if !tr.generics.params.is_empty() || tr.generics.where_clause.is_some() {
        errors.push(syn::Error::new(
            tr.generics.span(),
            "shmpipe::service: generic traits are not supported",
        ));
    }
    let mut methods = Vec::new();
    let mut signature = format!("{};", tr.ident);
    for (index, item) in tr.items.iter().enumerate() {
        if let Some(m) = errors.keep(method(item, index)) {
            signature.push_str(&signature_of(&m));
            methods.push(m);
        }
    }
    for e in clashes(&methods) {
        errors.push(e);
    }
    errors.finish(Service {
        methods,
        id: fnv(signature.as_bytes(), 0xcbf2_9ce4_8422_2325),
        version: args.version,
        max_frame: args.max_frame,
        rt: {
            let runtime = args.runtime;
            quote!(#runtime::__private)
        },
        item: tr,
    })
}

/// The client's functions share one namespace: each method `foo` is a
/// function of the client, beside its `send_foo`, `recv_foo` and
/// `try_foo`, and the client's constructors. A method whose name, or one
/// of whose companions' names, is already taken is an error at the
/// method's name, rather than rustc's "duplicate definitions" at the
/// attribute.
fn clashes(methods: &[Method]) -> Vec<syn::Error> {
    let mut taken: std::collections::HashMap<String, String> = ["new", "connect", "with_transport"]
        .into_iter()
        .map(|n| (n.to_string(), format!("the client's constructor `{n}`")))
        .collect();
    let mut errors = Vec::new();
    for m in methods {
        let n = m.name.to_string();
        let own = [
            (n.clone(), format!("method `{n}`")),
            (format!("send_{n}"), format!("`send_{n}` of method `{n}`")),
            (format!("recv_{n}"), format!("`recv_{n}` of method `{n}`")),
            (format!("try_{n}"), format!("`try_{n}` of method `{n}`")),
        ];
        for (name, what) in own {
            if let Some(other) = taken.insert(name.clone(), what.clone()) {
                errors.push(syn::Error::new(
                    m.name.span(),
                    format!(
                        "shmpipe::service: the client would have two functions named \
                         `{name}` ({other}, and {what}); rename the method"
                    ),
                ));
            }
        }
    }
    errors
}

const TAKE_SELF: &str = "shmpipe::service: methods take `&self` first (the generated client \
     calls them through a shared reference, and `Arc<S>` implements the trait)";

/// The trait's item at `index`, which must be a method the stubs can
/// carry; its opcode is its index.
fn method(item: &TraitItem, index: usize) -> syn::Result<Method> {
    let TraitItem::Fn(f) = item else {
        return Err(syn::Error::new(
            item.span(),
            "shmpipe::service: a service trait holds methods only",
        ));
    };
    let sig = &f.sig;
    let mut errors = Errors::default();
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(syn::Error::new(
            sig.generics.span(),
            "shmpipe::service: methods may not be generic",
        ));
    }
    if let Some(a) = &sig.asyncness {
        errors.push(syn::Error::new(
            a.span(),
            "shmpipe::service: methods may not be async (the stubs block)",
        ));
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        Some(FnArg::Receiver(r)) => errors.push(syn::Error::new(r.span(), TAKE_SELF)),
        _ => errors.push(syn::Error::new(sig.ident.span(), TAKE_SELF)),
    }
    let params = inputs.filter_map(|arg| errors.keep(param(arg))).collect();
    let ret = errors.keep(result(&sig.output));
    let op = u16::try_from(index)
        .map_err(|_| syn::Error::new(sig.span(), "shmpipe::service: too many methods"));
    let op = errors.keep(op);
    let (Some((ret, ret_kind)), Some(op)) = (ret, op) else {
        return Err(errors.into_error());
    };
    errors.finish(Method {
        name: sig.ident.clone(),
        op,
        params,
        ret,
        ret_kind,
        docs: f
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .cloned()
            .collect(),
    })
}

/// A parameter after the receiver: a plain name and a type that travels.
fn param(arg: &FnArg) -> syn::Result<Param> {
    let FnArg::Typed(pt) = arg else {
        return Err(syn::Error::new(
            arg.span(),
            "shmpipe::service: `self` comes first only",
        ));
    };
    let Pat::Ident(pi) = &*pt.pat else {
        return Err(syn::Error::new(
            pt.pat.span(),
            "shmpipe::service: parameters must be plain names",
        ));
    };
    let kind = classify(&pt.ty, false)?;
    if matches!(kind, Kind::Unit) {
        return Err(syn::Error::new(
            pt.ty.span(),
            "shmpipe::service: a `()` parameter carries nothing; leave it out",
        ));
    }
    Ok(Param {
        name: pi.ident.clone(),
        ty: (*pt.ty).clone(),
        kind,
    })
}

/// The method's result type (`()` if none is written) and its kind: it
/// may not borrow.
fn result(output: &ReturnType) -> syn::Result<(Type, Kind)> {
    let ReturnType::Type(_, t) = output else {
        return Ok((syn::parse_quote!(()), Kind::Unit));
    };
    let k = classify(t, true)?;
    if borrows(&k) {
        return Err(syn::Error::new(
            t.span(),
            "shmpipe::service: a result cannot borrow; return Vec<u8> or String",
        ));
    }
    Ok(((**t).clone(), k))
}

/// Whether a result of this kind would borrow from the reply.
fn borrows(k: &Kind) -> bool {
    match k {
        Kind::BytesIn | Kind::StrIn | Kind::BytesOut => true,
        Kind::Result(ok, err) => borrows(ok) || borrows(err),
        _ => false,
    }
}

/// The method's line of the interface's signature, which its id hashes:
/// `name(param types)->result;`.
fn signature_of(m: &Method) -> String {
    format!(
        "{}({})->{};",
        m.name,
        m.params
            .iter()
            .map(|p| p.ty.to_token_stream().to_string())
            .collect::<Vec<_>>()
            .join(","),
        m.ret.to_token_stream()
    )
}

/// FNV-1a, 64 bits.
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}
