//! `shmpipe fileserver` and `shmpipe cat`: the file server of
//! `shmpipe::fs` as a program, and a `cat` that reads through it.

use std::io::{self, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `shmpipe fileserver --root DIR --socket PATH`.
#[derive(Debug, clap::Args)]
pub struct FileserverArgs {
    /// Serve the regular files beneath this directory, read-only.
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Listen at this path (mode 0600, this user only). A socket file
    /// left there by a server that was killed is replaced; anything else
    /// there is an error.
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

/// Serves until stopped: Ctrl-C or SIGTERM removes the socket file and
/// exits (130 or 143, as a shell reports a death by that signal).
pub fn fileserver(args: FileserverArgs) -> io::Result<bool> {
    let server = shmpipe::fs::Server::new(&args.root).map_err(|e| {
        naming(
            e,
            format_args!("--root {}", args.root.display()),
            &args.root,
        )
    })?;
    let listener = shmpipe::fs::Server::bind(&args.socket).map_err(|e| {
        naming(
            e,
            format_args!("--socket {}", args.socket.display()),
            &args.socket,
        )
    })?;
    remove_on_signal(listener.path().to_path_buf())?;
    let root = std::fs::canonicalize(&args.root).unwrap_or(args.root);
    println!(
        "shmpipe fileserver: serving the files beneath {} (read-only) at {}; Ctrl-C stops",
        root.display(),
        args.socket.display()
    );
    io::stdout().flush()?;
    if !args.keep_fd_limit {
        // The server does not raise it by itself: this program chooses to
        // (see `--keep-fd-limit`).
        shmpipe::raise_fd_limit()?;
    }
    server.serve(listener)?;
    Ok(true)
}

/// On SIGINT or SIGTERM, removes the socket file at `path` (if a socket
/// is what is there) and exits with 128 + the signal. Without this, the
/// file would outlive the process: the next `bind` reclaims it, but a
/// server stopped the usual way should leave nothing behind.
fn remove_on_signal(path: PathBuf) -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(&path);
            }
            std::process::exit(128 + signal);
        }
    });
    Ok(())
}

/// `e` as the program says it: `shmpipe` once (the caller prints it),
/// and the file it concerns named once: by `what` ahead of the text,
/// unless the text is shmpipe's own and names `path` already (those of
/// `bind` and `connect` do; the system's own texts name no file).
fn naming(e: io::Error, what: std::fmt::Arguments<'_>, path: &Path) -> io::Error {
    let text = e.to_string();
    let (own, text) = match text.strip_prefix("shmpipe: ") {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    if own && text.contains(&path.display().to_string()) {
        io::Error::new(e.kind(), text.to_string())
    } else {
        io::Error::new(e.kind(), format!("{what}: {text}"))
    }
}

/// What `cat` says about `name`: the file server's errors start with the
/// name already (`missing.txt: no such file`); others get it ahead.
fn about_name(name: &str, e: &io::Error) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("shmpipe: ").unwrap_or(&text);
    if text.starts_with(&format!("{name}: ")) {
        text.to_string()
    } else {
        format!("{name}: {text}")
    }
}

/// Writes each file to stdout; a file it cannot serve is named on stderr
/// and makes the exit status non-zero, as with `cat`.
pub fn cat(args: CatArgs) -> ExitCode {
    let client = match shmpipe::fs::Client::connect(&args.socket) {
        Ok(c) => c,
        Err(e) => {
            let socket = args.socket.display();
            eprintln!(
                "shmpipe cat: {}",
                naming(e, format_args!("{socket}"), &args.socket)
            );
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
            // The file server's errors name the file already.
            eprintln!("shmpipe cat: {}", about_name(name, &e));
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
