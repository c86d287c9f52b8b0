//! The client half of the generated code: `FooClient<T>`, with per
//! method the trait's method, `try_`, and the pipelined `send_`/`recv_`
//! halves; a call of fixed sizes goes through the transport's fast path
//! (`call_fixed`) first.

use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Ident, Type};

use crate::model::{Kind, Method, Service};

/// `FooClient<T>`, its stubs and its `impl Foo`.
pub(crate) fn emit(service: &Service) -> Tokens {
    let tr = &service.item;
    let trait_name = &tr.ident;
    let vis = &tr.vis;
    let methods = &service.methods;
    let id = service.id;
    let version = service.version;
    let max_frame = service.max_frame;
    let client = format_ident!("{}Client", trait_name);
    let name_str = trait_name.to_string();
    let rt = &service.rt;

    let mut client_methods = Vec::new();
    let mut trait_impl = Vec::new();
    for m in methods {
        client_methods.push(client_method(m, rt, max_frame));
        trait_impl.push(trait_forward(m, rt, max_frame));
    }
    let client_doc = format!(
        "The client of [`{name_str}`]: a blocking stub per method over `T` (shmpipe rings by default)."
    );
    quote! {
        #[doc = #client_doc]
        #vis struct #client<T: #rt::Transport = #rt::ShmTransport> {
            inner: #rt::Client<T>,
        }

        impl<T: #rt::Transport> ::core::fmt::Debug for #client<T> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(::core::stringify!(#client))
            }
        }

        impl #client<#rt::ShmTransport> {
            /// Connects to the server listening at `path` and checks that
            /// it serves this interface and version.
            #vis fn connect(path: impl ::core::convert::AsRef<::std::path::Path>) -> ::std::io::Result<Self> {
                Self::new(#rt::__private::connect(path)?)
            }

            /// Speaks this interface over an established connection.
            #vis fn new(conn: #rt::__private::Connection) -> ::std::io::Result<Self> {
                Self::with_transport(#rt::ShmTransport::new(conn))
            }
        }

        #[allow(clippy::too_many_arguments)]
        impl<T: #rt::Transport> #client<T> {
            /// The interface's identity, version and limits.
            #vis const INTERFACE: #rt::Interface = #rt::Interface {
                name: #name_str,
                id: #id,
                version: #version,
                max_frame: #max_frame,
            };

            /// Speaks this interface over `transport`, after checking the
            /// server's interface and version.
            #vis fn with_transport(transport: T) -> ::std::io::Result<Self> {
                Ok(Self { inner: #rt::Client::new(transport, &Self::INTERFACE)? })
            }

            #(#client_methods)*
        }

        #[allow(clippy::too_many_arguments)]
        impl<T: #rt::Transport> #trait_name for #client<T> {
            #(#trait_impl)*
        }
    }
}

/// The parameters of the pipelined `send_` half: out buffers become lengths.
fn send_params(m: &Method) -> Vec<Tokens> {
    m.params
        .iter()
        .map(|p| {
            let n = &p.name;
            let t = &p.ty;
            match p.kind {
                Kind::BytesOut => quote!(#n: usize),
                _ => quote!(#n: #t),
            }
        })
        .collect()
}

fn client_method(m: &Method, rt: &Tokens, max_frame: u32) -> Tokens {
    let name = &m.name;
    let op = m.op;
    let try_name = format_ident!("try_{}", name);
    let send_name = format_ident!("send_{}", name);
    let recv_name = format_ident!("recv_{}", name);
    let send_name_raw = format_ident!("__send_{}_raw", name);
    let recv_name_raw = format_ident!("__recv_{}_raw", name);
    let ret = &m.ret;
    let all_params: Vec<Tokens> = m
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            let t = &p.ty;
            quote!(#n: #t)
        })
        .collect();
    let sparams = send_params(m);
    let send_names: Vec<&Ident> = m.params.iter().map(|p| &p.name).collect();
    let out_params: Vec<Tokens> = m
        .params
        .iter()
        .filter(|p| matches!(p.kind, Kind::BytesOut))
        .map(|p| {
            let n = &p.name;
            quote!(#n: &mut [u8])
        })
        .collect();
    let out_names: Vec<&Ident> = m
        .params
        .iter()
        .filter(|p| matches!(p.kind, Kind::BytesOut))
        .map(|p| &p.name)
        .collect();
    let send_args: Vec<Tokens> = m
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match p.kind {
                Kind::BytesOut => quote!(#n.len()),
                _ => quote!(#n),
            }
        })
        .collect();

    // The fixed part: plain data by its bytes, 4-byte lengths for the rest.
    let mut fixed_size = vec![quote!(0usize)];
    let mut encode = Vec::new();
    let mut tails = Vec::new();
    for p in &m.params {
        let n = &p.name;
        match &p.kind {
            Kind::Fixed(t) => {
                fixed_size.push(quote!(::core::mem::size_of::<#t>()));
                encode.push(quote! {
                    __f[__o..__o + ::core::mem::size_of::<#t>()]
                        .copy_from_slice(#rt::__private::IntoBytes::as_bytes(&#n));
                    __o += ::core::mem::size_of::<#t>();
                });
            }
            Kind::BytesIn | Kind::StrIn | Kind::Vec | Kind::Str => {
                fixed_size.push(quote!(4usize));
                encode.push(quote! {
                    let __b: &[u8] = ::core::convert::AsRef::<[u8]>::as_ref(&#n);
                    __f[__o..__o + 4].copy_from_slice(&#rt::wire::len32(__b.len())?.to_ne_bytes());
                    __o += 4;
                    __var += __b.len();
                });
                tails.push(quote! {
                    __t.put(::core::convert::AsRef::<[u8]>::as_ref(&#n))?;
                });
            }
            Kind::BytesOut => {
                fixed_size.push(quote!(4usize));
                encode.push(quote! {
                    __f[__o..__o + 4].copy_from_slice(&#rt::wire::len32(#n)?.to_ne_bytes());
                    __o += 4;
                    __out += #n;
                });
            }
            Kind::Unit | Kind::Result(..) => unreachable!("refused in classify"),
        }
    }
    let decode_ret = decode_value(&m.ret_kind, rt);
    // A reply of fixed size: its whole header checked by one compare.
    let fast = match (&m.ret_kind, out_names.is_empty()) {
        (Kind::Fixed(t), true) => quote! {
            if __h == #rt::wire::ok_header(::core::mem::size_of::<#t>()) {
                let mut __b = [0u8; ::core::mem::size_of::<#t>()];
                __t.take(&mut __b)?;
                __t.done();
                return #rt::wire::decode::<#t>(&__b);
            }
        },
        (Kind::Unit, true) => quote! {
            if __h == #rt::wire::ok_header(0) {
                __t.done();
                return ::core::result::Result::Ok(());
            }
        },
        _ => Tokens::new(),
    };
    let recv_cold = format_ident!("__recv_{}_cold", name);
    let general = format_ident!("__try_{}_general", name);
    let sent = format_ident!("__{}_sent", name);
    let unsent = format_ident!("__{}_unsent", name);
    let name_str = name.to_string();
    let all_names: Vec<&Ident> = m.params.iter().map(|p| &p.name).collect();
    let fast_call = match fixed_fast(m, rt, max_frame) {
        Some((call, decode)) => quote! {
            match #call {
                #rt::Fixed::Done(__b) => return #decode,
                #rt::Fixed::Sent(__c) => return Self::#recv_cold(__c),
                #rt::Fixed::Unsent => {}
            }
            self.#general(#(#all_names),*)
        },
        None => Tokens::new(),
    };
    let try_doc = quote! {
        /// Calls the method; transport and protocol failures come back as
        /// errors (the method of the trait panics on them instead).
    };
    let try_fn = if fast_call.is_empty() {
        quote! {
            #try_doc
            #[inline(always)]
            pub fn #try_name(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
                let mut __t = self.inner.transport()?;
                Self::#send_name_raw(&mut *__t, #(#send_args),*)?;
                Self::#recv_name_raw(&mut *__t, #(#out_names),*)
            }
        }
    } else {
        quote! {
            #try_doc
            ///
            /// Its request and reply have fixed sizes: it is written and
            /// read in place when the transport can (see
            /// `shmpipe::rpc::Transport::call_fixed`), the general way
            /// otherwise (out of line).
            #[inline(always)]
            #[allow(clippy::identity_op)]
            pub fn #try_name(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
                #fast_call
            }

            #[doc(hidden)]
            #[cold]
            #[inline(never)]
            fn #general(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
                let mut __t = self.inner.transport()?;
                Self::#send_name_raw(&mut *__t, #(#send_args),*)?;
                Self::#recv_name_raw(&mut *__t, #(#out_names),*)
            }

            #[doc(hidden)]
            #[cold]
            #[inline(never)]
            fn #recv_cold(__c: &#rt::Client<T>) -> ::std::io::Result<#ret> {
                Self::#recv_name_raw(&mut *__c.transport()?)
            }

            // The trait method's ways out of the fast path, unwrapped
            // where they are (a result merged after the call would meet
            // the fast path's in memory).
            #[doc(hidden)]
            #[cold]
            #[inline(never)]
            fn #sent(__c: &#rt::Client<T>) -> #ret {
                match Self::#recv_cold(__c) {
                    ::core::result::Result::Ok(v) => v,
                    ::core::result::Result::Err(e) => #rt::call_failed(#name_str, e),
                }
            }

            #[doc(hidden)]
            #[cold]
            #[inline(never)]
            fn #unsent(&self, #(#all_params),*) -> #ret {
                match self.#general(#(#all_names),*) {
                    ::core::result::Result::Ok(v) => v,
                    ::core::result::Result::Err(e) => #rt::call_failed(#name_str, e),
                }
            }
        }
    };
    quote! {
        /// Sends the request of this method without waiting for its
        /// reply (`recv_` takes it); `&mut [u8]` parameters are given as
        /// lengths here.
        #[inline]
        pub fn #send_name(&self, #(#sparams),*) -> ::std::io::Result<()> {
            let mut __t = self.inner.transport()?;
            Self::#send_name_raw(&mut *__t, #(#send_names),*)?;
            __t.flush()
        }

        #[doc(hidden)]
        #[inline(always)]
        #[allow(unused_mut, unused_variables, clippy::identity_op)]
        fn #send_name_raw(__t: &mut T, #(#sparams),*) -> ::std::io::Result<()> {
            const __FIXED: usize = #(#fixed_size)+*;
            let mut __f = [0u8; #rt::wire::HEADER + __FIXED];
            let mut __o = #rt::wire::HEADER;
            let mut __var = 0usize;
            let mut __out = 0usize;
            #(#encode)*
            #rt::wire::request_header(&mut __f, #op, __FIXED + __var, __out, &Self::INTERFACE)?;
            __t.put(&__f)?;
            #(#tails)*
            ::core::result::Result::Ok(())
        }

        /// Waits for the reply to the oldest request sent with `send_` and
        /// decodes it; out buffers of the request are filled here.
        #[inline]
        pub fn #recv_name(&self, #(#out_params),*) -> ::std::io::Result<#ret> {
            let mut __t = self.inner.transport()?;
            Self::#recv_name_raw(&mut *__t, #(#out_names),*)
        }

        #[doc(hidden)]
        #[inline(always)]
        #[allow(unused_mut)]
        fn #recv_name_raw(__t: &mut T, #(#out_params),*) -> ::std::io::Result<#ret> {
            let __h = __t.call()?;
            #fast
            let mut __rest = #rt::wire::expect_ok(__t, __h, Self::INTERFACE.max_frame)?;
            #( #rt::wire::take_bytes(__t, &mut __rest, #out_names)?; )*
            let __v: #ret = #decode_ret;
            #rt::wire::finish(__t, __rest)?;
            ::core::result::Result::Ok(__v)
        }

        #try_fn

    }
}

/// The fast path of a call of fixed sizes (plain-data parameters, a
/// plain-data or `()` result): the `call_fixed` expression, which writes
/// the frame in place (or says why not), and the decoding of the reply's
/// bytes `__b` into an `io::Result`. `None` for other methods, or if the
/// sizes exceed the interface's `max_frame` (then every call goes the
/// general way, which reports it).
fn fixed_fast(m: &Method, rt: &Tokens, max_frame: u32) -> Option<(Tokens, Tokens)> {
    let op = m.op;
    let ps: Vec<(&Ident, &Type)> = m
        .params
        .iter()
        .map(|p| match &p.kind {
            Kind::Fixed(t) => Some((&p.name, &**t)),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (rsize, decode) = match &m.ret_kind {
        Kind::Fixed(t) => (
            quote!(::core::mem::size_of::<#t>()),
            quote!(#rt::wire::decode::<#t>(&__b)),
        ),
        Kind::Unit => (
            quote!(0usize),
            quote!({
                let _ = __b;
                ::core::result::Result::Ok(())
            }),
        ),
        _ => return None,
    };
    let sizes = ps.iter().map(|(_, t)| quote!(::core::mem::size_of::<#t>()));
    let puts = ps.iter().map(|(n, t)| {
        quote! {
            __f.put(__o, &#n);
            __o += ::core::mem::size_of::<#t>();
        }
    });
    let call = quote! {{
        const __BODY: usize = 0usize #(+ #sizes)*;
        const __R: usize = #rsize;
        const __FITS: bool = (if __BODY > __R { __BODY } else { __R }) <= #max_frame as usize;
        if __FITS {
            self.inner.call_fixed::<{ #rt::wire::HEADER + __BODY }, __R>(
                |__f| {
                    __f.put(0, &#rt::wire::header(__BODY as u32, #op));
                    let mut __o = #rt::wire::HEADER;
                    #(#puts)*
                    let _ = __o;
                },
                #rt::wire::ok_header(__R),
            )
        } else {
            #rt::Fixed::Unsent
        }
    }};
    Some((call, decode))
}

fn decode_value(k: &Kind, rt: &Tokens) -> Tokens {
    match k {
        Kind::Unit => quote!(()),
        Kind::Fixed(t) => quote!({
            let mut __b = [0u8; ::core::mem::size_of::<#t>()];
            #rt::wire::take_bytes(__t, &mut __rest, &mut __b)?;
            #rt::wire::decode::<#t>(&__b)?
        }),
        Kind::Vec => quote!(#rt::wire::take_vec(__t, &mut __rest)?),
        Kind::Str => quote!(#rt::wire::take_string(__t, &mut __rest)?),
        Kind::Result(ok, err) => {
            let ok = decode_value(ok, rt);
            let err = decode_value(err, rt);
            quote! {{
                let mut __tag = [0u8; 1];
                #rt::wire::take_bytes(__t, &mut __rest, &mut __tag)?;
                match __tag[0] {
                    0 => ::core::result::Result::Ok(#ok),
                    1 => ::core::result::Result::Err(#err),
                    _ => return ::core::result::Result::Err(#rt::wire::bad_reply("result tag")),
                }
            }}
        }
        Kind::BytesIn | Kind::StrIn | Kind::BytesOut => unreachable!("refused in expand"),
    }
}

fn trait_forward(m: &Method, rt: &Tokens, max_frame: u32) -> Tokens {
    let name = &m.name;
    let try_name = format_ident!("try_{}", name);
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
    let name_str = name.to_string();
    // A call of fixed sizes: the fast path here too, each way out
    // unwrapped where it is (merged after `try_`, the three results would
    // meet in memory).
    if let Some((call, decode)) = fixed_fast(m, rt, max_frame) {
        let sent = format_ident!("__{}_sent", name);
        let unsent = format_ident!("__{}_unsent", name);
        return quote! {
            #[inline]
            fn #name(&self, #(#params),*) -> #ret {
                match #call {
                    #rt::Fixed::Done(__b) => match #decode {
                        ::core::result::Result::Ok(v) => v,
                        ::core::result::Result::Err(e) => #rt::call_failed(#name_str, e),
                    },
                    #rt::Fixed::Sent(__c) => Self::#sent(__c),
                    #rt::Fixed::Unsent => self.#unsent(#(#names),*),
                }
            }
        };
    }
    quote! {
        #[inline]
        fn #name(&self, #(#params),*) -> #ret {
            match self.#try_name(#(#names),*) {
                ::core::result::Result::Ok(v) => v,
                ::core::result::Result::Err(e) => #rt::call_failed(#name_str, e),
            }
        }
    }
}
