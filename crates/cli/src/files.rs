//! `shmpipe fileserver` and `shmpipe cat`: the file server of
//! `shmpipe::fs` as a program, and a `cat` that reads through it.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// `shmpipe fileserver --root DIR --socket PATH`.
#[derive(Debug, clap::Args)]
pub struct FileserverArgs {
    /// Serve the regular files beneath this directory, read-only.
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Listen at this path (it must not exist; mode 0600, this user only).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Keep this process's open-file limit as it is. By default the
    /// server raises its soft limit (RLIMIT_NOFILE) to the hard limit:
    /// each client takes six descriptors, and the usual soft limit of
    /// 1024 serves about 160 clients.
    #[arg(long)]
    keep_fd_limit: bool,
}

/// `shmpipe cat --socket PATH NAME...`.
#[derive(Debug, clap::Args)]
pub struct CatArgs {
    /// The file server's socket.
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Files to write to standard output, in order (relative to the root).
    #[arg(value_name = "NAME", required = true)]
    names: Vec<String>,
}

/// Serves until killed.
pub fn fileserver(args: FileserverArgs) -> io::Result<bool> {
    let server = shmpipe::fs::Server::new(&args.root)
        .map_err(|e| io::Error::new(e.kind(), format!("--root {}: {e}", args.root.display())))?;
    let listener = shmpipe::fs::Server::bind(&args.socket).map_err(|e| {
        io::Error::new(e.kind(), format!("--socket {}: {e}", args.socket.display()))
    })?;
    if !args.keep_fd_limit {
        // The server does not raise it by itself: this program chooses to
        // (see `--keep-fd-limit`).
        shmpipe::raise_fd_limit()?;
    }
    server.serve(listener)?;
    Ok(true)
}

/// Writes each file to stdout; a file it cannot serve is named on stderr
/// and makes the exit status non-zero, as with `cat`.
pub fn cat(args: CatArgs) -> ExitCode {
    let client = match shmpipe::fs::Client::connect(&args.socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shmpipe cat: {}: {e}", args.socket.display());
            return ExitCode::FAILURE;
        }
    };
    let mut out = io::stdout().lock();
    let mut ok = true;
    for name in &args.names {
        let r = client
            .open(name)
            .and_then(|mut f| io::copy(&mut f, &mut out).map(|_| ()));
        if let Err(e) = r {
            let _ = out.flush();
            if e.kind() == io::ErrorKind::BrokenPipe {
                return ExitCode::FAILURE;
            }
            eprintln!("shmpipe cat: {name}: {e}");
            ok = false;
        }
    }
    if out.flush().is_err() {
        ok = false;
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
