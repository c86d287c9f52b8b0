//! The server half of the generated code: `FooServer<S>`, the
//! `Dispatch` of any `S: Foo` (a `match` on the opcode that decodes the
//! arguments in place and encodes the result into the reply), and
//! `impl Foo for Arc<S>`.

use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::Ident;

use crate::model::{Kind, Method, Service};

/// `impl Foo for Arc<S>`, `FooServer<S>` and its `Dispatch`.
pub(crate) fn emit(service: &Service) -> Tokens {
    let trait_name = &service.item.ident;
    let vis = &service.item.vis;
    let methods = &service.methods;
    let server = format_ident!("{}Server", trait_name);
    let rt = &service.rt;
    let interface = service.interface();
    let arc_impl = methods.iter().map(arc_forward);
    let arms = methods.iter().map(|m| server_arm(m, trait_name, rt));
    let bounds = methods.iter().map(|m| bound_arm(m, rt));
    let server_doc = format!(
        "Serves an implementation of [`{trait_name}`]: give it to `shmpipe::rpc::serve` or `Conn::new`."
    );
    quote! {
        #[allow(clippy::too_many_arguments)]
        impl<S: #trait_name + ?Sized> #trait_name for ::std::sync::Arc<S> {
            #(#arc_impl)*
        }

        #[doc = #server_doc]
        #[derive(Debug, Clone)]
        #vis struct #server<S>(pub S);

        impl<S: #trait_name> #rt::Dispatch for #server<S> {
            const INTERFACE: #rt::Interface = #interface;

            #[inline]
            fn dispatch(
                &mut self,
                op: u16,
                body: &[u8],
                reply: &mut #rt::Reply<'_>,
            ) -> ::core::result::Result<(), #rt::Refused> {
                match op {
                    #(#arms)*
                    _ => ::core::result::Result::Err(#rt::Refused::UnknownOp),
                }
            }

            #[inline]
            fn reply_bound(op: u16, body: &[u8]) -> ::core::option::Option<usize> {
                match op {
                    #(#bounds)*
                    _ => ::core::option::Option::None,
                }
            }
        }
    }
}

/// The most bytes a result of this kind takes, if that is known.
fn static_size(k: &Kind) -> Option<Tokens> {
    match k {
        Kind::Unit => Some(quote!(0usize)),
        Kind::Fixed(t) => Some(quote!(::core::mem::size_of::<#t>())),
        Kind::Result(ok, err) => {
            let (ok, err) = (static_size(ok)?, static_size(err)?);
            Some(quote!(1usize + if #ok > #err { #ok } else { #err }))
        }
        _ => None,
    }
}

/// A `reply_bound` arm: the reply's size from the request's out lengths,
/// when its result has a fixed size.
fn bound_arm(m: &Method, rt: &Tokens) -> Tokens {
    let op = m.op;
    let Some(result) = static_size(&m.ret_kind) else {
        return quote!(#op => ::core::option::Option::None,);
    };
    let mut fixed_size = vec![quote!(0usize)];
    let mut steps = Vec::new();
    for p in &m.params {
        match &p.kind {
            Kind::Fixed(t) => {
                fixed_size.push(quote!(::core::mem::size_of::<#t>()));
                steps.push(quote!(__c.fixed::<[u8; ::core::mem::size_of::<#t>()]>().ok()?;));
            }
            Kind::BytesOut => {
                fixed_size.push(quote!(4usize));
                steps.push(quote!(__n += __c.len().ok()?;));
            }
            _ => {
                fixed_size.push(quote!(4usize));
                steps.push(quote!(__c.len().ok()?;));
            }
        }
    }
    quote! {
        #op => {
            const __FIXED: usize = #(#fixed_size)+*;
            let mut __c = #rt::Cursor::new(body, __FIXED).ok()?;
            let mut __n = 0usize;
            #(#steps)*
            ::core::option::Option::Some(__n + #result)
        }
    }
}

/// Statements that write the result `v`, of kind `k`, into `reply`.
fn encode_value(k: &Kind, v: Tokens) -> Tokens {
    match k {
        Kind::Unit => quote!({ let () = #v; }),
        Kind::Fixed(_) => quote!(reply.put_fixed(&#v)?;),
        Kind::Vec | Kind::Str => {
            quote!(reply.put_var(::core::convert::AsRef::<[u8]>::as_ref(&#v))?;)
        }
        Kind::Result(ok, err) => {
            let ok = encode_value(ok, quote!(__ok));
            let err = encode_value(err, quote!(__err));
            quote! {
                match #v {
                    ::core::result::Result::Ok(__ok) => { reply.put_fixed(&0u8)?; #ok }
                    ::core::result::Result::Err(__err) => { reply.put_fixed(&1u8)?; #err }
                }
            }
        }
        Kind::BytesIn | Kind::StrIn | Kind::BytesOut => unreachable!("refused in parse"),
    }
}

/// A method of `impl Foo for Arc<S>`: the call forwarded.
fn arc_forward(m: &Method) -> Tokens {
    let name = &m.name;
    let ret = &m.ret;
    let params = m.typed_params();
    let names = m.param_names();
    quote! {
        #[inline]
        fn #name(&self, #(#params),*) -> #ret {
            (**self).#name(#(#names),*)
        }
    }
}

/// How a method's arguments are read from the request body, in place.
struct Decoding {
    /// The fixed part's size, as a sum.
    fixed_size: Vec<Tokens>,
    /// `let __aN = ...;` for each parameter (a length for an out buffer).
    decode: Vec<Tokens>,
    /// The arguments of the call, `__aN` for parameter N.
    call_args: Vec<Ident>,
    /// Each out buffer and the variable holding its length.
    outs: Vec<(Ident, Ident)>,
}

fn decoding(m: &Method) -> Decoding {
    let mut d = Decoding {
        fixed_size: vec![quote!(0usize)],
        decode: Vec::new(),
        call_args: Vec::new(),
        outs: Vec::new(),
    };
    for (i, p) in m.params.iter().enumerate() {
        let n = format_ident!("__a{}", i);
        let size = match &p.kind {
            Kind::Fixed(t) => {
                d.decode.push(quote!(let #n: #t = __c.fixed::<#t>()?;));
                quote!(::core::mem::size_of::<#t>())
            }
            Kind::BytesIn => {
                d.decode.push(quote!(let #n: &[u8] = __c.bytes()?;));
                quote!(4usize)
            }
            Kind::StrIn => {
                d.decode.push(quote!(let #n: &str = __c.str()?;));
                quote!(4usize)
            }
            Kind::Vec => {
                d.decode
                    .push(quote!(let #n: ::std::vec::Vec<u8> = __c.bytes()?.to_vec();));
                quote!(4usize)
            }
            Kind::Str => {
                d.decode
                    .push(quote!(let #n: ::std::string::String = __c.str()?.to_owned();));
                quote!(4usize)
            }
            Kind::BytesOut => {
                let len = format_ident!("__l{}", i);
                d.decode.push(quote!(let #len: usize = __c.len()?;));
                d.outs.push((n.clone(), len));
                quote!(4usize)
            }
            Kind::Unit | Kind::Result(..) => unreachable!("refused in parse"),
        };
        d.fixed_size.push(size);
        d.call_args.push(n);
    }
    d
}

/// A `dispatch` arm: the arguments read in place (the out buffers cut
/// from the reply's room), the method called, its result written.
fn server_arm(m: &Method, trait_name: &Ident, rt: &Tokens) -> Tokens {
    let name = &m.name;
    let op = m.op;
    let Decoding {
        fixed_size,
        decode,
        call_args,
        outs,
    } = decoding(m);
    let out_total = outs.iter().map(|(_, l)| l);
    let splits = outs
        .iter()
        .map(|(n, l)| quote!(let (#n, __outs) = __outs.split_at_mut(#l);));
    let encode = encode_value(&m.ret_kind, quote!(__r));
    quote! {
        #op => {
            const __FIXED: usize = #(#fixed_size)+*;
            let mut __c = #rt::Cursor::new(body, __FIXED)?;
            #(#decode)*
            __c.finish()?;
            let __outs: &mut [u8] = reply.out_area(0usize #(+ #out_total)*)?;
            #(#splits)*
            let _ = __outs;
            let __r = <S as #trait_name>::#name(&self.0, #(#call_args),*);
            #encode
            ::core::result::Result::Ok(())
        }
    }
}
