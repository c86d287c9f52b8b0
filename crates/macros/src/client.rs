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
    let trait_name = &service.item.ident;
    let vis = &service.item.vis;
    let client = format_ident!("{}Client", trait_name);
    let rt = &service.rt;
    let interface = service.interface();
    let stubs = service
        .methods
        .iter()
        .map(|m| method_stubs(m, rt, service.max_frame));
    let trait_methods = service
        .methods
        .iter()
        .map(|m| trait_method(m, rt, service.max_frame));
    let client_doc = format!(
        "The client of [`{trait_name}`]: a blocking stub per method over `T` (shmpipe rings by default)."
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

        #[allow(clippy::too_many_arguments)]
        impl<T: #rt::Transport> #trait_name for #client<T> {
            #(#trait_methods)*
        }
    }
}

/// The names of the functions generated for method `foo`: those users
/// call, and the hidden ones they are made of.
struct Names {
    /// `try_foo`: the call, its failures as errors.
    try_name: Ident,
    /// `send_foo` and `recv_foo`: the two halves, for pipelining.
    send: Ident,
    recv: Ident,
    /// The halves on a held transport, shared by every way of calling.
    send_raw: Ident,
    recv_raw: Ident,
    /// The general way of `try_foo`, out of line.
    general: Ident,
    /// Reads the reply once the fast path sent the request.
    recv_cold: Ident,
    /// The trait method's two ways out of the fast path.
    sent: Ident,
    unsent: Ident,
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
            general: format_ident!("__try_{}_general", name),
            recv_cold: format_ident!("__recv_{}_cold", name),
            sent: format_ident!("__{}_sent", name),
            unsent: format_ident!("__{}_unsent", name),
        }
    }
}

/// A method's inherent functions on the client: `send_`, `recv_` and
/// `try_`, with the hidden steps they share.
fn method_stubs(m: &Method, rt: &Tokens, max_frame: u32) -> Tokens {
    let names = Names::of(m);
    let send = send_half(m, &names, rt);
    let recv = recv_half(m, &names, rt);
    let try_fn = try_method(m, &names, rt, max_frame);
    quote! {
        #send
        #recv
        #try_fn
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

/// `try_foo`: the general way (send, then receive, on the held
/// transport), or for a call of fixed sizes the fast path first, with the
/// general way and the trait method's ways out of the fast path kept out
/// of line.
fn try_method(m: &Method, names: &Names, rt: &Tokens, max_frame: u32) -> Tokens {
    let ret = &m.ret;
    let Names {
        try_name,
        general,
        recv_cold,
        ..
    } = names;
    let all_params = m.typed_params();
    let try_doc = quote! {
        /// Calls the method; transport and protocol failures come back as
        /// errors (the method of the trait panics on them instead).
    };
    let Some((call, decode)) = fixed_fast(m, rt, max_frame) else {
        let body = general_body(m, names);
        return quote! {
            #try_doc
            #[inline(always)]
            pub fn #try_name(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
                #body
            }
        };
    };
    let all_names = m.param_names();
    let out_of_line = out_of_line(m, names, rt);
    quote! {
        #try_doc
        ///
        /// Its request and reply have fixed sizes: over shmpipe's rings
        /// (`ShmTransport`) it is written and read in place, the general
        /// way otherwise (out of line).
        #[inline(always)]
        #[allow(clippy::identity_op)]
        pub fn #try_name(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
            match #call {
                #rt::Fixed::Done(__b) => return #decode,
                #rt::Fixed::Sent(__c) => return Self::#recv_cold(__c),
                #rt::Fixed::Unsent => {}
            }
            self.#general(#(#all_names),*)
        }

        #out_of_line
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

/// What a method of fixed sizes keeps out of line, off its fast path:
/// the general way of `try_`, the reading of a reply the fast path could
/// not take, and the trait method's two ways out of the fast path.
fn out_of_line(m: &Method, names: &Names, rt: &Tokens) -> Tokens {
    let ret = &m.ret;
    let Names {
        recv_raw,
        general,
        recv_cold,
        sent,
        unsent,
        ..
    } = names;
    let all_params = m.typed_params();
    let all_names = m.param_names();
    let body = general_body(m, names);
    let name_str = m.name.to_string();
    quote! {
        #[doc(hidden)]
        #[cold]
        #[inline(never)]
        fn #general(&self, #(#all_params),*) -> ::std::io::Result<#ret> {
            #body
        }

        #[doc(hidden)]
        #[cold]
        #[inline(never)]
        fn #recv_cold(__c: &#rt::Channel<T>) -> ::std::io::Result<#ret> {
            Self::#recv_raw(&mut *__c.transport()?)
        }

        // The trait method's ways out of the fast path, unwrapped
        // where they are (a result merged after the call would meet
        // the fast path's in memory).
        #[doc(hidden)]
        #[cold]
        #[inline(never)]
        fn #sent(__c: &#rt::Channel<T>) -> #ret {
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

/// The trait's method on the client: `try_` unwrapped (a failure panics),
/// or for a call of fixed sizes the fast path here too, each way out
/// unwrapped where it is (merged after `try_`, the three results would
/// meet in memory).
fn trait_method(m: &Method, rt: &Tokens, max_frame: u32) -> Tokens {
    let name = &m.name;
    let Names {
        try_name,
        sent,
        unsent,
        ..
    } = Names::of(m);
    let ret = &m.ret;
    let params = m.typed_params();
    let names = m.param_names();
    let name_str = name.to_string();
    if let Some((call, decode)) = fixed_fast(m, rt, max_frame) {
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
