//! An echo server on tokio: `tokio_echo [CLIENTS]`.
//!
//! Binds a [`shmpipe::tokio::AsyncListener`], starts `CLIENTS` copies of
//! itself (default 3) as client processes, and echoes each connection on
//! a task of one current-thread runtime with `tokio::io::copy`, since
//! [`AsyncReader`] and [`AsyncWriter`] are tokio's `AsyncRead` and
//! `AsyncWrite`. Each client, on a runtime of its own, sends lines and
//! checks that every one comes back; then it leaves, its connection's
//! copy ends, and the server exits once every client has left.
//!
//! ```text
//! cargo run -p shmpipe --features tokio --example tokio_echo -- [CLIENTS]
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use shmpipe::tokio::{AsyncListener, AsyncReader, AsyncWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Lines each client sends.
const LINES: usize = 1000;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let first = args.next();
    let result = if first.as_deref() == Some("--client".as_ref()) {
        let path = PathBuf::from(args.next().expect("--client PATH ID"));
        let id = args.next().expect("--client PATH ID");
        runtime().and_then(|rt| rt.block_on(client(&path, &id.to_string_lossy())))
    } else {
        match first.map(|s| s.into_string().ok()?.parse::<usize>().ok()) {
            None => server(3),
            Some(Some(n)) => server(n),
            Some(None) => {
                eprintln!("usage: tokio_echo [CLIENTS]");
                return ExitCode::from(2);
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokio_echo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

fn server(clients: usize) -> io::Result<()> {
    let path = std::env::temp_dir().join(format!("shmpipe-tokio-echo-{}.sock", std::process::id()));
    let rt = runtime()?;
    let children = rt.block_on(async {
        // Inside the runtime: the listener registers with its reactor.
        let listener = AsyncListener::new(shmpipe::Listener::bind(&path)?)?;
        println!("tokio_echo: listening on {}", path.display());
        let mut children = Vec::new();
        for id in 0..clients {
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.arg("--client").arg(&path).arg(id.to_string());
            children.push(cmd.spawn()?);
        }
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let conn = listener.accept().await?;
            let pid = conn.peer.pid;
            let (reader, writer) = conn.split();
            let (mut reader, mut writer) = (AsyncReader::new(reader)?, AsyncWriter::new(writer)?);
            tasks.push(tokio::spawn(async move {
                // Until the client's end of the connection is gone (EOF).
                let bytes = tokio::io::copy(&mut reader, &mut writer).await?;
                println!("tokio_echo: echoed {bytes} bytes to process {pid}");
                io::Result::Ok(())
            }));
        }
        // Every client is in: the listener (and its socket file) can go.
        drop(listener);
        for task in tasks {
            task.await.map_err(io::Error::other)??;
        }
        io::Result::Ok(children)
    })?;
    for mut child in children {
        let status = child.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!("a client failed: {status}")));
        }
    }
    println!("tokio_echo: every client done, {} removed", path.display());
    Ok(())
}

async fn client(path: &Path, id: &str) -> io::Result<()> {
    let (reader, writer) = shmpipe::connect(path)?.split();
    let (mut reader, mut writer) = (AsyncReader::new(reader)?, AsyncWriter::new(writer)?);
    let mut back = Vec::new();
    for i in 0..LINES {
        let line = format!("client {id}, line {i}\n");
        writer.write_all(line.as_bytes()).await?;
        back.resize(line.len(), 0);
        reader.read_exact(&mut back).await?;
        if back != line.as_bytes() {
            return Err(io::Error::other(format!("line {i} came back changed")));
        }
    }
    println!("tokio_echo: client {id} got its {LINES} lines back");
    Ok(())
}
