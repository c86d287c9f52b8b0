//! An RPC server: `rpc_server PATH [CLIENTS]`.
//!
//! Serves the `Calc` interface (in `calc/mod.rs`, shared with
//! `rpc_client`) on a [`shmpipe::Listener`] bound at `PATH`, one thread per
//! client, until `CLIENTS` clients (default 1) have come and gone; then it
//! removes the socket file and exits. Run it in one terminal and the
//! client in another:
//!
//! ```text
//! cargo run -p shmpipe --features rpc --example rpc_server -- /tmp/calc.sock
//! cargo run -p shmpipe --features rpc --example rpc_client -- /tmp/calc.sock
//! ```
//!
//! A server that runs for good needs none of the loop below: it hands the
//! listener to `shmpipe::rpc::serve_waitset` (all clients from one
//! thread), `serve_threads` or `serve` (a thread per client, as here).

use std::cell::Cell;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use shmpipe::rpc::Conn;
use shmpipe::Listener;

mod calc;
use calc::{Calc, CalcServer};

/// The implementation; one per client, so a plain `Cell` counts its calls.
#[derive(Default)]
struct Calculator {
    calls: Cell<u64>,
}

impl Calc for Calculator {
    fn add(&self, a: u32, b: u32) -> u32 {
        self.calls.set(self.calls.get() + 1);
        a.wrapping_add(b)
    }

    fn upper(&self, text: &str) -> String {
        self.calls.set(self.calls.get() + 1);
        text.to_uppercase()
    }

    fn count_up(&self, seed: u8, out: &mut [u8]) -> u32 {
        self.calls.set(self.calls.get() + 1);
        for (i, b) in out.iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        out.len() as u32
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: rpc_server PATH [CLIENTS]");
        return ExitCode::from(2);
    };
    let clients = match args
        .next()
        .map(|s| s.into_string().ok()?.parse::<usize>().ok())
    {
        None => 1,
        Some(Some(n)) => n,
        Some(None) => {
            eprintln!("rpc_server: CLIENTS must be a number");
            return ExitCode::from(2);
        }
    };
    match serve(path, clients) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpc_server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(path: PathBuf, clients: usize) -> io::Result<()> {
    // Only processes of this user may connect (the listener's default).
    let listener = Listener::bind(&path)?;
    println!(
        "rpc_server: serving Calc on {} for {clients} client(s)",
        path.display()
    );
    let mut threads = Vec::new();
    for _ in 0..clients {
        let conn = listener.accept()?;
        let pid = conn.peer.pid;
        println!("rpc_server: client (pid {pid}) connected");
        threads.push(std::thread::spawn(move || -> io::Result<()> {
            let mut conn = Conn::new(CalcServer(Calculator::default()), conn);
            // Returns once the client has gone.
            conn.serve()?;
            let calls = conn.dispatcher().0.calls.get();
            println!("rpc_server: client (pid {pid}) left after {calls} calls");
            Ok(())
        }));
    }
    // No more clients: dropping the listener removes the socket file.
    drop(listener);
    for t in threads {
        t.join().expect("a serving thread panicked")?;
    }
    println!("rpc_server: done, {} removed", path.display());
    Ok(())
}
