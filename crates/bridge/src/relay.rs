//! The floor the bridge is measured against: the same frames, carried
//! over one plain TCP connection per local connection by two relay
//! processes, with no Zenoh and no TLS. For benchmarks on loopback only:
//! it authenticates nobody, so it refuses any other address.

use std::io;
use std::net::SocketAddr;
use std::path::Path;

use shmpipe_core::tokio::{AsyncListener, AsyncReader, AsyncWriter};
use shmpipe_core::{Connection, Listener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::frame::PREFIX;
use crate::pieces::read_frame;

fn loopback_only(addr: SocketAddr) -> io::Result<()> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the TCP relay authenticates nobody: loopback addresses only",
        ))
    }
}

/// Binds a listener at `socket`; each connection goes to `to` over TCP.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// shmpipe_bridge::relay::connect("/tmp/floor.sock", "127.0.0.1:7000".parse().unwrap()).await
/// # }
/// ```
pub async fn connect(socket: impl AsRef<Path>, to: SocketAddr) -> io::Result<()> {
    loopback_only(to)?;
    let mut listener = Listener::bind(socket)?;
    listener.set_options(
        shmpipe_core::Options::new()
            .capacity(crate::REPLY_RING)
            .clone(),
    );
    let listener = AsyncListener::new(listener)?;
    loop {
        let local = listener.accept().await?;
        let tcp = TcpStream::connect(to).await?;
        tokio::spawn(pump(local, tcp));
    }
}

/// Accepts TCP connections at `at`; each goes to the service at `socket`.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// shmpipe_bridge::relay::serve("127.0.0.1:7000".parse().unwrap(), "/tmp/service.sock").await
/// # }
/// ```
pub async fn serve(at: SocketAddr, socket: impl AsRef<Path>) -> io::Result<()> {
    loopback_only(at)?;
    let tcp = TcpListener::bind(at).await?;
    loop {
        let (stream, _) = tcp.accept().await?;
        let socket = socket.as_ref().to_path_buf();
        let local = tokio::task::spawn_blocking(move || shmpipe_core::connect(socket))
            .await
            .map_err(io::Error::other)??;
        tokio::spawn(pump(local, stream));
    }
}

/// Frames both ways until either side ends.
async fn pump(local: Connection, tcp: TcpStream) -> io::Result<()> {
    tcp.set_nodelay(true)?;
    let (mut tcp_in, mut tcp_out) = tcp.into_split();
    let (reader, writer) = local.split();
    let mut reader = AsyncReader::new(reader)?;
    let mut writer = AsyncWriter::new(writer)?;
    let up = async move {
        while let Some(msg) = read_frame(&mut reader, u32::MAX).await? {
            tcp_out.write_all(&msg[1..]).await?;
        }
        io::Result::Ok(())
    };
    let down = async move {
        let mut header = [0u8; PREFIX];
        let mut body = Vec::new();
        loop {
            tcp_in.read_exact(&mut header[1..]).await?;
            let len = crate::frame::frame_len(&header, u32::MAX)
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
            body.resize(len, 0);
            tcp_in.read_exact(&mut body).await?;
            writer.write_all(&header[1..]).await?;
            writer.write_all(&body).await?;
            writer.flush().await?;
        }
    };
    tokio::select! {
        r = up => r,
        r = down => r,
    }
}
