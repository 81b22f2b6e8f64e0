//! `heapsnap serve`: the local web UI (crate heapsnap-web).

use clap::Args;
use heapsnap_analyze::Progress;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct ServeArgs {
    /// Snapshots, oldest first (two or more: the diff view too).
    #[arg(required = true)]
    snapshots: Vec<PathBuf>,
    /// Listen on this address instead of 127.0.0.1 (anyone who can reach it and has the token
    /// can read the snapshots).
    #[arg(long)]
    bind: Option<IpAddr>,
    /// Port (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    heapsnap_analyze::tune_allocator();
    let ip = args.bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    if !ip.is_loopback() {
        eprintln!("heapsnap serve: WARNING: listening on {ip}, not only this machine: anyone who can reach it and has the token can read these snapshots");
    }
    let app = heapsnap_web::App::load(&args.snapshots, &Progress::stderr())?;
    let server = heapsnap_web::Server::bind(SocketAddr::new(ip, args.port), heapsnap_web::random_token()?)?;
    println!("heapsnap serve: open {}", server.url());
    std::io::stdout().flush()?;
    server.run(&app);
    Ok(ExitCode::SUCCESS)
}
