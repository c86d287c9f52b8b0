//! An RPC client: `rpc_client PATH`.
//!
//! Connects to the `rpc_server` example listening at `PATH` and calls each
//! method of the `Calc` interface (in `calc/mod.rs`, shared with the
//! server), checking every answer:
//!
//! ```text
//! cargo run -p shmpipe --features rpc --example rpc_server -- /tmp/calc.sock
//! cargo run -p shmpipe --features rpc --example rpc_client -- /tmp/calc.sock
//! ```
//!
//! Each method of `CalcClient` takes the arguments of `Calc`'s and
//! returns an `io::Result` of its result: `calc.add(2, 3)?` reads as a
//! local call, and a server that dies is an error here, not a panic.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

mod calc;
use calc::CalcClient;

/// Calls of `add` in the loop at the end.
const CALLS: u32 = 10_000;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: rpc_client PATH");
        return ExitCode::from(2);
    };
    match run(path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpc_client: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: PathBuf) -> io::Result<()> {
    // Greets the server and checks that it serves `Calc` version 1.
    let calc = CalcClient::connect(&path)?;
    println!("rpc_client: connected to {}", path.display());

    let sum = calc.add(2, 3)?;
    println!("rpc_client: add(2, 3) = {sum}");
    check(sum == 5, "add")?;

    let text = calc.upper("hello, shmpipe")?;
    println!("rpc_client: upper(\"hello, shmpipe\") = {text:?}");
    check(text == "HELLO, SHMPIPE", "upper")?;

    // The server writes straight into this buffer's place in the reply.
    let mut buf = [0u8; 8];
    let n = calc.count_up(10, &mut buf)?;
    println!("rpc_client: count_up(10) filled {n} bytes: {buf:?}");
    check(
        n == 8 && buf == [10, 11, 12, 13, 14, 15, 16, 17],
        "count_up",
    )?;

    let mut total = 0u32;
    for i in 0..CALLS {
        total = calc.add(total, i)?;
    }
    println!("rpc_client: {CALLS} more calls of add, total {total}");
    check(total == (0..CALLS).sum::<u32>(), "add in a loop")?;
    Ok(())
}

fn check(ok: bool, what: &str) -> io::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(io::Error::other(format!("wrong answer from {what}")))
    }
}
