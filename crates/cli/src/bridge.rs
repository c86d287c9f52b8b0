//! `shmpipe bridge serve` and `shmpipe bridge connect` (feature `zenoh`):
//! the bridge of `shmpipe-bridge` as a program.

use std::io;
use std::path::PathBuf;

use shmpipe_bridge::{BridgeLimits, Options, Tls};

mod bench;
pub use bench::bench;

/// Whether `shmpipe bench --filter ...` asks for the bridge's figures.
pub fn wants_bench(filter: &[String]) -> bool {
    filter
        .iter()
        .flat_map(|f| f.split(','))
        .any(|f| f == "bridge")
}

/// `shmpipe bridge serve|connect ...`.
#[derive(Debug, clap::Args)]
pub struct BridgeArgs {
    #[command(subcommand)]
    side: Side,
}

#[derive(Debug, clap::Subcommand)]
enum Side {
    /// Make the local service listening at --socket reachable as Zenoh
    /// key --key, over mutual TLS.
    ///
    /// Each remote connection becomes one local connection of this
    /// process, which the service checks as any local client's.
    Serve {
        /// The local service's socket (a `#[shmpipe::service]` server or
        /// `shmpipe fileserver`).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// The Zenoh key it is reachable as.
        #[arg(long, value_name = "KEY")]
        key: String,
        /// Listen on this Zenoh endpoint, such as `quic/0.0.0.0:7447`
        /// (repeatable).
        #[arg(long, value_name = "ENDPOINT")]
        listen: Vec<String>,
        /// Admit only the peer whose certificate bears this common name
        /// (repeatable). Each name is one peer for --per-peer, proved by
        /// its certificate. Without it, any certificate of the CA may
        /// connect and a peer is counted by the session id it sends.
        #[arg(long, value_name = "NAME")]
        peer: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Bind a listener at --socket whose connections are carried to the
    /// service a remote `bridge serve` makes reachable as --key.
    Connect {
        /// The Zenoh key of the remote service.
        #[arg(long, value_name = "KEY")]
        key: String,
        /// Listen here for local clients (mode 0600, this user only).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Connect to this Zenoh endpoint, such as `quic/host:7447`
        /// (repeatable).
        #[arg(long, value_name = "ENDPOINT")]
        connect: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// For `bench`: the null service and a file server.
    #[command(hide = true)]
    BenchServer {
        #[arg(long)]
        null: PathBuf,
        #[arg(long)]
        files: PathBuf,
        #[arg(long)]
        root: PathBuf,
    },
    /// For `bench`: Zenoh alone, the answering side (`probe::answer`).
    #[command(hide = true)]
    ProbeAnswer {
        #[arg(long)]
        key: String,
        #[arg(long)]
        listen: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// For `bench`: the serving relay of the TCP floor (loopback only).
    #[command(hide = true)]
    RelayServe {
        #[arg(long)]
        at: std::net::SocketAddr,
        #[arg(long)]
        socket: PathBuf,
    },
    /// For `bench`: the connecting relay of the TCP floor (loopback only).
    #[command(hide = true)]
    RelayConnect {
        #[arg(long)]
        to: std::net::SocketAddr,
        #[arg(long)]
        socket: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
struct Common {
    /// A Zenoh configuration file (JSON5): endpoints, mode, TLS. The
    /// other options go on top. Scouting stays off unless it names it; on
    /// `serve`, its `access_control` gives way to the bridge's, which lets
    /// each remote peer reach only its own connections.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The CA certificate (PEM) that peers' certificates must chain to.
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// This bridge's certificate (PEM); a serving bridge's names the
    /// address it is reached at.
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// This bridge's private key (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    tls_key: Option<PathBuf>,
    /// Run without TLS: plain TCP, on loopback endpoints only. Without
    /// this, a bridge with no mutual TLS refuses to start.
    #[arg(long)]
    insecure: bool,
    /// Serve: remote connections carried at once.
    #[arg(long, value_name = "N", default_value_t = shmpipe_bridge::DEFAULT_CONNECTIONS)]
    connections: usize,
    /// Serve: connections of one remote peer at once.
    #[arg(long, value_name = "N", default_value_t = shmpipe_bridge::DEFAULT_PER_PEER)]
    per_peer: usize,
    /// Bytes in flight per connection and direction.
    #[arg(long, value_name = "BYTES", default_value_t = shmpipe_bridge::DEFAULT_WINDOW)]
    window: usize,
    /// The largest RPC frame body carried.
    #[arg(long, value_name = "BYTES", default_value_t = shmpipe_bridge::DEFAULT_MAX_FRAME)]
    max_frame: u32,
}

impl Common {
    fn options(self, endpoints: Vec<String>) -> Options {
        let mut limits = BridgeLimits::new();
        limits
            .connections(self.connections)
            .per_peer(self.per_peer)
            .window(self.window)
            .max_frame(self.max_frame);
        let tls = match (self.tls_ca, self.tls_cert, self.tls_key) {
            (Some(ca), Some(cert), Some(key)) => Some(Tls { ca, cert, key }),
            _ => None,
        };
        Options {
            config: self.config,
            endpoints,
            tls,
            insecure: self.insecure,
            limits,
            peers: Vec::new(),
        }
    }
}

/// Runs a side until it fails (or is killed).
pub fn run(args: BridgeArgs) -> io::Result<bool> {
    if let Side::BenchServer { null, files, root } = &args.side {
        return bench::server(null, files, root);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match args.side {
            Side::Serve {
                socket,
                key,
                listen,
                peer,
                common,
            } => {
                let mut options = common.options(listen);
                options.peers = peer;
                eprintln!("shmpipe bridge: serving {} as key {key}", socket.display());
                shmpipe_bridge::serve(&socket, &key, &options).await
            }
            Side::Connect {
                key,
                socket,
                connect,
                common,
            } => {
                let options = common.options(connect);
                eprintln!("shmpipe bridge: key {key} at {}", socket.display());
                shmpipe_bridge::connect(&key, &socket, &options).await
            }
            Side::ProbeAnswer {
                key,
                listen,
                common,
            } => shmpipe_bridge::probe::answer(&key, &common.options(listen)).await,
            Side::RelayServe { at, socket } => shmpipe_bridge::relay::serve(at, &socket).await,
            Side::RelayConnect { to, socket } => shmpipe_bridge::relay::connect(&socket, to).await,
            Side::BenchServer { .. } => unreachable!("handled above"),
        }
    })?;
    Ok(true)
}
