//! The file server and its client: `file_server [DIR]`.
//!
//! Serves `DIR` (by default a fresh directory with two small files) with
//! [`shmpipe::fs::Server`] on a thread of this process, then, as a client
//! would from any process of the same user, lists it with
//! [`shmpipe::fs::Client`], reads up to five of its files back through the
//! server and compares each with what is on disk, and shows that a name
//! leading out of the directory is refused.
//!
//! ```text
//! cargo run -p shmpipe --features rpc --example file_server
//! cargo run -p shmpipe --features rpc --example file_server -- src
//! ```
//!
//! The same server as a program of its own, with a client in another
//! terminal: `shmpipe fileserver --root DIR --socket PATH` and
//! `shmpipe cat --socket PATH NAME`.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Files read back at most.
const FILES: usize = 5;

fn main() -> ExitCode {
    let pid = std::process::id();
    let socket = std::env::temp_dir().join(format!("shmpipe-file-server-{pid}.sock"));
    let (root, made) = match std::env::args_os().nth(1) {
        Some(dir) => (PathBuf::from(dir), false),
        None => (
            std::env::temp_dir().join(format!("shmpipe-file-server-{pid}")),
            true,
        ),
    };
    let result = run(&root, made, &socket);
    // The serving thread still holds the listener: remove its file here.
    let _ = std::fs::remove_file(&socket);
    if made {
        let _ = std::fs::remove_dir_all(&root);
    }
    match result {
        Ok(()) => {
            println!("file_server: done, {} removed", socket.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("file_server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(root: &Path, make: bool, socket: &Path) -> io::Result<()> {
    if make {
        std::fs::create_dir(root)?;
        std::fs::write(root.join("hello.txt"), "hello through shared memory\n")?;
        let numbers: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(root.join("numbers.bin"), numbers)?;
    }

    // The server: names resolve strictly beneath `root`, read-only.
    let server = shmpipe::fs::Server::new(root)?;
    let listener = shmpipe::fs::Server::bind(socket)?;
    println!(
        "file_server: serving {} on {}",
        root.display(),
        socket.display()
    );
    std::thread::spawn(move || server.serve(listener));

    // The client.
    let client = shmpipe::fs::Client::connect(socket)?;
    let names = client.list("")?;
    println!("file_server: the client lists {} names", names.len());
    let files = names
        .iter()
        .filter(|name| std::fs::symlink_metadata(root.join(name)).is_ok_and(|m| m.is_file()));
    for name in files.take(FILES) {
        let mut file = client.open(name)?;
        let mut served = Vec::new();
        file.read_to_end(&mut served)?;
        if served != std::fs::read(root.join(name))? {
            return Err(io::Error::other(format!("{name}: differs from the disk")));
        }
        println!(
            "file_server: read {name}: {} bytes, the same as on disk",
            served.len()
        );
    }

    match client.open("../etc/passwd") {
        Err(e) => println!("file_server: ../etc/passwd refused: {e}"),
        Ok(_) => return Err(io::Error::other("a name outside the root was served")),
    }
    Ok(())
}
