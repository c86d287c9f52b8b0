//! The server half of the generated code: `FooServer<S>`, the
//! `Dispatch` of any `S: Foo` (a `match` on the opcode that decodes the
//! arguments in place and encodes the result into the reply), and
//! `impl Foo for Arc<S>`.

use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::Ident;

use crate::model::{Kind, Method, Service};

/// `impl Foo for Arc<S>`, `FooServer<S>` and its `Dispatch`.
pub(crate) fn emit(service: &Service) -> Tokens {
    let tr = &service.item;
    let trait_name = &tr.ident;
    let vis = &tr.vis;
    let methods = &service.methods;
    let id = service.id;
    let version = service.version;
    let max_frame = service.max_frame;
    let server = format_ident!("{}Server", trait_name);
    let name_str = trait_name.to_string();
    let rt = &service.rt;
    let bounds: Vec<Tokens> = methods.iter().map(|m| bound_arm(m, rt)).collect();
    let mut arc_impl = Vec::new();
    let mut arms = Vec::new();
    for m in methods {
        arc_impl.push(arc_forward(m));
        arms.push(server_arm(m, trait_name, rt));
    }
    let server_doc = format!(
        "Serves an implementation of [`{name_str}`]: give it to `shmpipe::rpc::serve` or `Conn::new`."
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
            const INTERFACE: #rt::Interface = #rt::Interface {
                name: #name_str,
                id: #id,
                version: #version,
                max_frame: #max_frame,
            };

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
        Kind::BytesIn | Kind::StrIn | Kind::BytesOut => unreachable!("refused in expand"),
    }
}

fn arc_forward(m: &Method) -> Tokens {
    let name = &m.name;
    let ret = &m.ret;
    let params: Vec<Tokens> = m
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            let t = &p.ty;
            quote!(#n: #t)
        })
        .collect();
    let names: Vec<&Ident> = m.params.iter().map(|p| &p.name).collect();
    quote! {
        #[inline]
        fn #name(&self, #(#params),*) -> #ret {
            (**self).#name(#(#names),*)
        }
    }
}

fn server_arm(m: &Method, trait_name: &Ident, rt: &Tokens) -> Tokens {
    let name = &m.name;
    let op = m.op;
    let mut fixed_size = vec![quote!(0usize)];
    let mut decode = Vec::new();
    let mut outs = Vec::new();
    let mut call_args = Vec::new();
    for (i, p) in m.params.iter().enumerate() {
        let n = format_ident!("__a{}", i);
        match &p.kind {
            Kind::Fixed(t) => {
                fixed_size.push(quote!(::core::mem::size_of::<#t>()));
                decode.push(quote!(let #n: #t = __c.fixed::<#t>()?;));
                call_args.push(quote!(#n));
            }
            Kind::BytesIn => {
                fixed_size.push(quote!(4usize));
                decode.push(quote!(let #n: &[u8] = __c.bytes()?;));
                call_args.push(quote!(#n));
            }
            Kind::StrIn => {
                fixed_size.push(quote!(4usize));
                decode.push(quote!(let #n: &str = __c.str()?;));
                call_args.push(quote!(#n));
            }
            Kind::Vec => {
                fixed_size.push(quote!(4usize));
                decode.push(quote!(let #n: ::std::vec::Vec<u8> = __c.bytes()?.to_vec();));
                call_args.push(quote!(#n));
            }
            Kind::Str => {
                fixed_size.push(quote!(4usize));
                decode.push(quote!(let #n: ::std::string::String = __c.str()?.to_owned();));
                call_args.push(quote!(#n));
            }
            Kind::BytesOut => {
                fixed_size.push(quote!(4usize));
                let len = format_ident!("__l{}", i);
                decode.push(quote!(let #len: usize = __c.len()?;));
                outs.push((n.clone(), len));
                call_args.push(quote!(#n));
            }
            Kind::Unit | Kind::Result(..) => unreachable!("refused in classify"),
        }
    }
    let out_total: Vec<&Ident> = outs.iter().map(|(_, l)| l).collect();
    let splits: Vec<Tokens> = outs
        .iter()
        .map(|(n, l)| quote!(let (#n, __outs) = __outs.split_at_mut(#l);))
        .collect();
    let encode = encode_value(&m.ret_kind, quote!(__r));
    let _ = Span::call_site();
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
