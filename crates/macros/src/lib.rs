//! `#[shmpipe::service]`: turns a trait into an RPC interface over shmpipe
//! (use it through the `shmpipe` crate's `rpc` feature, which documents
//! the generated types and the wire format).
//!
//! For `trait Foo` it emits, beside the trait:
//!
//! * `FooClient<T = shmpipe::rpc::ShmTransport>`: per method, the method
//!   (same parameters, an `io::Result` of its result: a transport failure
//!   is an error, never a panic), `send_<method>`/`recv_<method>`
//!   (pipelining) and `try_<method>` (its old name, deprecated); and
//!   `connect(path)`, `new(Connection)` and `with_transport(t)`. It does
//!   not implement `Foo`, whose signatures have no room for the error;
//! * `FooServer<S>`: `shmpipe::rpc::Dispatch` for any `S: Foo`, a static
//!   `match` on the opcode;
//! * `impl Foo for Arc<S>` so one implementation can serve many clients.
//!
//! Argument kinds are decided by their spelling: `&[u8]`, `&str`,
//! `&mut [u8]` (filled by the server, in place), `Vec<u8>`, `String`,
//! `()`, `Result<T, E>` (results only); anything else is plain data
//! passed by its bytes through `zerocopy` (`IntoBytes`, `TryFromBytes`,
//! `Immutable`), which covers integers, floats, `bool`, arrays and
//! `#[repr(C)]` structs and enums deriving those traits.
//!
//! The generated code names the runtime crate (`shmpipe-rpc`) only, and
//! only through its hidden `__private` module. Here,
//! `parse` reads the attribute and the trait into the `model`, from which
//! `client` and `server` generate their halves.

mod client;
mod model;
mod parse;
mod server;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::ItemTrait;

use model::Service;

/// Generates an RPC client and server dispatcher for a trait; see the
/// `shmpipe::rpc` module. Options: `version = N` (default 1),
/// `max_frame = BYTES` (the largest request or reply body, default 1 MiB)
/// and `crate = PATH`, the path of the RPC runtime the generated code
/// names (default `::shmpipe::rpc`; a crate below the `shmpipe` facade,
/// such as `shmpipe-fs`, names `::shmpipe_rpc`).
#[proc_macro_attribute]
pub fn service(attr: TokenStream, item: TokenStream) -> TokenStream {
    let tr = syn::parse_macro_input!(item as ItemTrait);
    // On an error the trait is emitted still, so that the only errors are
    // the attribute's, not every use of the trait's.
    let service = syn::parse::<parse::Args>(attr).and_then(|args| parse::service(args, tr.clone()));
    match service {
        Ok(service) => expand(service).into(),
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#tr #e).into()
        }
    }
}

/// The trait as it was, then the client and the server generated for it.
fn expand(service: Service) -> Tokens {
    let tr = &service.item;
    let client = client::emit(&service);
    let server = server::emit(&service);
    quote! {
        #tr

        #client

        #server
    }
}
