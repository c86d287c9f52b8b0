//! The client half of the generated code: `FooClient<T>`, with per
//! method the method itself (an `io::Result` of the trait's result), the
//! pipelined `send_`/`recv_` halves and the deprecated `try_` alias; a
//! call of fixed sizes goes through the transport's fast path
//! (`call_fixed`) first.
//!
//! The client does not implement the trait: the trait's signatures have
//! no room for a transport error, so a client implementing it could only
//! panic when the server dies, and a library call must not panic on an
//! I/O error its caller could handle.

use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Ident, Type};

use crate::model::{Kind, Method, Service};

/// `FooClient<T>`, its stubs and its `impl Foo`.
pub(crate) fn emit(service: &Service) -> Tokens {
    let trait_name = &service.item.ident;
    let vis = &service.item.vis;
    let client = format_ident!("{}Client", trait_name);
    let rt = &service.rt;
    let interface = service.interface();
    let stubs = service
        .methods
        .iter()
        .map(|m| method_stubs(m, rt, service.max_frame));
    let client_doc = format!(
        "The client of [`{trait_name}`]: a blocking stub per method over `T` (shmpipe rings by \
         default), each returning an `io::Result` of the method's result."
    );
    quote! {
        #[doc = #client_doc]
        #vis struct #client<T: #rt::Transport = #rt::ShmTransport> {
            inner: #rt::Channel<T>,
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
                Self::new(#rt::connect(path)?)
            }

            /// Speaks this interface over an established connection.
            #vis fn new(conn: #rt::Connection) -> ::std::io::Result<Self> {
                Self::with_transport(#rt::ShmTransport::new(conn))
            }
        }

        #[allow(clippy::too_many_arguments)]
        impl<T: #rt::Transport> #client<T> {
            /// The interface's identity, version and limits.
            #vis const INTERFACE: #rt::Interface = #interface;

            /// Speaks this interface over `transport`, after checking the
            /// server's interface and version.
            #vis fn with_transport(transport: T) -> ::std::io::Result<Self> {
                ::core::result::Result::Ok(Self {
                    inner: #rt::Channel::new(transport, &Self::INTERFACE)?,
                })
            }

            #(#stubs)*
        }
    }
}

/// The names of the functions generated for method `foo` (beside `foo`
/// itself): those users call, and the hidden ones they are made of.
struct Names {
    /// `try_foo`: the old name of `foo`, deprecated.
    try_name: Ident,
    /// `send_foo` and `recv_foo`: the two halves, for pipelining.
    send: Ident,
    recv: Ident,
    /// The halves on a held transport, shared by every way of calling.
    send_raw: Ident,
    recv_raw: Ident,
    /// The general way of `foo`, out of line.
    general: Ident,
    /// Reads the reply once the fast path sent the request.
    recv_cold: Ident,
}

impl Names {
    fn of(m: &Method) -> Names {
        let name = &m.name;
        Names {
            try_name: format_ident!("try_{}", name),
            send: format_ident!("send_{}", name),
            recv: format_ident!("recv_{}", name),
            send_raw: format_ident!("__send_{}_raw", name),
            recv_raw: format_ident!("__recv_{}_raw", name),
            general: format_ident!("__{}_general", name),
            recv_cold: format_ident!("__recv_{}_cold", name),
        }
    }
}

/// A method's functions on the client: the method, `send_`, `recv_` and
/// `try_`, with the hidden steps they share.
fn method_stubs(m: &Method, rt: &Tokens, max_frame: u32) -> Tokens {
    let names = Names::of(m);
    let send = send_half(m, &names, rt);
    let recv = recv_half(m, &names, rt);
    let call = call_method(m, &names, rt, max_frame);
    let alias = try_alias(m, &names);
    quote! {
        #call
        #send
        #recv
        #alias
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

/// What writing a request takes, parameter by parameter.
struct Request {
    /// The fixed part's size, as a sum: plain data by its bytes, 4-byte
    /// lengths for the rest.
    fixed_size: Vec<Tokens>,
    /// Statements that write each parameter's share of the fixed part
    /// into the frame `__f` at `__o`.
    encode: Vec<Tokens>,
    /// Statements that put the variable parameters' bytes after it.
    tails: Vec<Tokens>,
}

fn request(m: &Method, rt: &Tokens) -> Request {
    let mut r = Request {
        fixed_size: vec![quote!(0usize)],
        encode: Vec::new(),
        tails: Vec::new(),
    };
    for p in &m.params {
        let n = &p.name;
        match &p.kind {
            Kind::Fixed(t) => {
                r.fixed_size.push(quote!(::core::mem::size_of::<#t>()));
                r.encode.push(quote! {
                    __f[__o..__o + ::core::mem::size_of::<#t>()]
                        .copy_from_slice(#rt::IntoBytes::as_bytes(&#n));
                    __o += ::core::mem::size_of::<#t>();
                });
            }
            Kind::BytesIn | Kind::StrIn | Kind::Vec | Kind::Str => {
                r.fixed_size.push(quote!(4usize));
                r.encode.push(quote! {
                    let __b: &[u8] = ::core::convert::AsRef::<[u8]>::as_ref(&#n);
                    __f[__o..__o + 4].copy_from_slice(&#rt::len32(__b.len())?.to_ne_bytes());
                    __o += 4;
                    __var += __b.len();
                });
                r.tails.push(quote! {
                    __t.put(::core::convert::AsRef::<[u8]>::as_ref(&#n))?;
                });
            }
            Kind::BytesOut => {
                r.fixed_size.push(quote!(4usize));
                r.encode.push(quote! {
                    __f[__o..__o + 4].copy_from_slice(&#rt::len32(#n)?.to_ne_bytes());
                    __o += 4;
                    __out += #n;
                });
            }
            Kind::Unit | Kind::Result(..) => unreachable!("refused in parse"),
        }
    }
    r
}

/// `send_foo`, and `__send_foo_raw`, which writes the request.
fn send_half(m: &Method, names: &Names, rt: &Tokens) -> Tokens {
    let op = m.op;
    let Names { send, send_raw, .. } = names;
    let sparams = send_params(m);
    let send_names = m.param_names();
    let Request {
        fixed_size,
        encode,
        tails,
    } = request(m, rt);
    quote! {
        /// Sends the request of this method without waiting for its
        /// reply (`recv_` takes it); `&mut [u8]` parameters are given as
        /// lengths here.
        #[inline]
        pub fn #send(&self, #(#sparams),*) -> ::std::io::Result<()> {
            let mut __t = self.inner.transport()?;
            Self::#send_raw(&mut *__t, #(#send_names),*)?;
            __t.flush()
        }

        #[doc(hidden)]
        #[inline(always)]
        #[allow(unused_mut, unused_variables, clippy::identity_op)]
        fn #send_raw(__t: &mut T, #(#sparams),*) -> ::std::io::Result<()> {
            const __FIXED: usize = #(#fixed_size)+*;
            let mut __f = [0u8; #rt::HEADER + __FIXED];
            let mut __o = #rt::HEADER;
            let mut __var = 0usize;
            let mut __out = 0usize;
            #(#encode)*
            #rt::request_header(&mut __f, #op, __FIXED + __var, __out, &Self::INTERFACE)?;
            __t.put(&__f)?;
            #(#tails)*
            ::core::result::Result::Ok(())
        }
    }
}

/// `recv_foo`, and `__recv_foo_raw`, which reads the reply.
fn recv_half(m: &Method, names: &Names, rt: &Tokens) -> Tokens {
    let ret = &m.ret;
    let Names { recv, recv_raw, .. } = names;
    let out_names: Vec<&Ident> = m.out_params().map(|p| &p.name).collect();
    let out_params: Vec<Tokens> = out_names.iter().map(|n| quote!(#n: &mut [u8])).collect();
    let fast = fixed_reply_check(m, rt);
    let decode_ret = decode_value(&m.ret_kind, rt);
    quote! {
        /// Waits for the reply to the oldest request sent with `send_` and
        /// decodes it; out buffers of the request are filled here.
        #[inline]
        pub fn #recv(&self, #(#out_params),*) -> ::std::io::Result<#ret> {
            let mut __t = self.inner.transport()?;
            Self::#recv_raw(&mut *__t, #(#out_names),*)
        }

        #[doc(hidden)]
        #[inline(always)]
        #[allow(unused_mut)]
        fn #recv_raw(__t: &mut T, #(#out_params),*) -> ::std::io::Result<#ret> {
            let __h = __t.call()?;
            #fast
            let mut __rest = #rt::expect_ok(__t, __h, Self::INTERFACE.max_frame)?;
            #( #rt::take_bytes(__t, &mut __rest, #out_names)?; )*
            let __v: #ret = #decode_ret;
            #rt::finish(__t, __rest)?;
            ::core::result::Result::Ok(__v)
        }
    }
}

/// For a reply of fixed size (and no out buffers): its whole header
/// checked by one compare, then its bytes read; nothing otherwise.
fn fixed_reply_check(m: &Method, rt: &Tokens) -> Tokens {
    if m.out_params().next().is_some() {
        return Tokens::new();
    }
    match &m.ret_kind {
        Kind::Fixed(t) => quote! {
            if __h == #rt::ok_header(::core::mem::size_of::<#t>()) {
                let mut __b = [0u8; ::core::mem::size_of::<#t>()];
                __t.take(&mut __b)?;
                __t.done();
                return #rt::decode::<#t>(&__b);
            }
        },
        Kind::Unit => quote! {
            if __h == #rt::ok_header(0) {
                __t.done();
                return ::core::result::Result::Ok(());
            }
        },
        _ => Tokens::new(),
    }
}

/// The method itself: the general way (send, then receive, on the held
/// transport), or for a call of fixed sizes the fast path first, with the
/// general way and the reading of a reply the fast path could not take
/// kept out of line. Its docs are the trait method's, then its errors.
fn call_method(m: &Method, names: &Names, rt: &Tokens, max_frame: u32) -> Tokens {
    let name = &m.name;
    let ret = &m.ret;
    let Names {
        general, recv_cold, ..
    } = names;
    let all_params = m.typed_params();
    let docs = &m.docs;
    let intro = if docs.is_empty() {
        let line = format!(" Calls `{name}` on the server.");
        quote!(#[doc = #line])
    } else {
        quote!(#(#docs)*)
    };
    let doc = quote! {
        #intro
        ///
        /// # Errors
        ///
        /// A failure of the transport or of the protocol, never a panic:
        /// `BrokenPipe` or `UnexpectedEof` when the server is gone,
        /// `InvalidData` for a reply that breaks the format, `InvalidInput`
        /// for a request over the interface's `max_frame`, `WouldBlock`
        /// while another call on this client is in progress.
    };
    let Some((call, decode)) = fixed_fast(m, rt, max_frame) else {
        let body = general_body(m, names);
        return quote! {
            #doc
            #[inline(always)]
            pub fn #name(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
                #body
            }
        };
    };
    let all_names = m.param_names();
    let body = general_body(m, names);
    let recv_raw = &names.recv_raw;
    quote! {
        #doc
        ///
        /// Its request and reply have fixed sizes: over shmpipe's rings
        /// (`ShmTransport`) it is written and read in place, the general
        /// way otherwise (out of line).
        #[inline(always)]
        #[allow(clippy::identity_op)]
        pub fn #name(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
            // The ways out of line leave their value in `__v` and return
            // only whether they failed (see `joined`).
            match #call {
                #rt::Fixed::Done(__b) => #decode,
                #rt::Fixed::Sent(__c) => {
                    let mut __v = ::core::option::Option::None;
                    let __r = Self::#recv_cold(__c, &mut __v);
                    #rt::joined(__r, __v)
                }
                #rt::Fixed::Unsent => {
                    let mut __v = ::core::option::Option::None;
                    let __r = self.#general(#(#all_names,)* &mut __v);
                    #rt::joined(__r, __v)
                }
            }
        }

        #[doc(hidden)]
        #[cold]
        #[inline(never)]
        fn #general(&self, #(#all_params,)* __out: &mut ::core::option::Option<#ret>) -> ::std::io::Result<()> {
            *__out = ::core::option::Option::Some({ #body }?);
            ::core::result::Result::Ok(())
        }

        #[doc(hidden)]
        #[cold]
        #[inline(never)]
        fn #recv_cold(__c: &#rt::Channel<T>, __out: &mut ::core::option::Option<#ret>) -> ::std::io::Result<()> {
            *__out = ::core::option::Option::Some(Self::#recv_raw(&mut *__c.transport()?)?);
            ::core::result::Result::Ok(())
        }
    }
}

/// `try_foo`, the name `foo` had when `foo` itself panicked on a failed
/// call: kept, deprecated, for one release, so that code written for it
/// still builds (with a warning that says what to call instead).
fn try_alias(m: &Method, names: &Names) -> Tokens {
    let name = &m.name;
    let ret = &m.ret;
    let try_name = &names.try_name;
    let all_params = m.typed_params();
    let all_names = m.param_names();
    let doc = format!(
        " The old name of [`{name}`](Self::{name}), which now returns the `io::Result` itself."
    );
    let note = format!("`{name}` returns the `io::Result` itself now; call it instead");
    quote! {
        #[doc = #doc]
        #[deprecated(note = #note)]
        #[inline(always)]
        pub fn #try_name(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
            self.#name(#(#all_names),*)
        }
    }
}

/// A call the general way: the request sent and the reply read on the
/// held transport (out buffers go as their lengths, come back filled).
fn general_body(m: &Method, names: &Names) -> Tokens {
    let Names {
        send_raw, recv_raw, ..
    } = names;
    let send_args = m.params.iter().map(|p| {
        let n = &p.name;
        match p.kind {
            Kind::BytesOut => quote!(#n.len()),
            _ => quote!(#n),
        }
    });
    let out_names = m.out_params().map(|p| &p.name);
    quote! {
        let mut __t = self.inner.transport()?;
        Self::#send_raw(&mut *__t, #(#send_args),*)?;
        Self::#recv_raw(&mut *__t, #(#out_names),*)
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
            quote!(#rt::decode::<#t>(&__b)),
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
            self.inner.call_fixed::<{ #rt::HEADER + __BODY }, __R>(
                |__f| {
                    __f.put(0, &#rt::header(__BODY as u32, #op));
                    let mut __o = #rt::HEADER;
                    #(#puts)*
                    let _ = __o;
                },
                #rt::ok_header(__R),
            )
        } else {
            #rt::Fixed::Unsent
        }
    }};
    Some((call, decode))
}

/// An expression that reads a result of kind `k` from the reply (`__t`,
/// with `__rest` bytes left), `?` on failure.
fn decode_value(k: &Kind, rt: &Tokens) -> Tokens {
    match k {
        Kind::Unit => quote!(()),
        Kind::Fixed(t) => quote!({
            let mut __b = [0u8; ::core::mem::size_of::<#t>()];
            #rt::take_bytes(__t, &mut __rest, &mut __b)?;
            #rt::decode::<#t>(&__b)?
        }),
        Kind::Vec => quote!(#rt::take_vec(__t, &mut __rest)?),
        Kind::Str => quote!(#rt::take_string(__t, &mut __rest)?),
        Kind::Result(ok, err) => {
            let ok = decode_value(ok, rt);
            let err = decode_value(err, rt);
            quote! {{
                let mut __tag = [0u8; 1];
                #rt::take_bytes(__t, &mut __rest, &mut __tag)?;
                match __tag[0] {
                    0 => ::core::result::Result::Ok(#ok),
                    1 => ::core::result::Result::Err(#err),
                    _ => return ::core::result::Result::Err(#rt::bad_reply("result tag")),
                }
            }}
        }
        Kind::BytesIn | Kind::StrIn | Kind::BytesOut => unreachable!("refused in parse"),
    }
}
