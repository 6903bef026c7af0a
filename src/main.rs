#![forbid(unsafe_code)]
//! The `uagate` binary: command-line parsing only; every command calls into
//! the gateway crates.

mod datadir;
mod systemd;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use uagate_config::Config;
use uagate_store::{CertKind, Role, Store};

/// Writes `text` to standard output (every line the CLI prints goes
/// through here: [`out!`], [`outln!`]). A reader that went away before
/// the end (`uagate user list | head -1`) ends the output normally: the
/// rest is dropped, without the error or the panic (`println!`) a closed
/// pipe otherwise causes.
fn print_out(text: std::fmt::Arguments) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_fmt(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to standard output")
        }
        _ => Ok(()),
    }
}

/// `print!` through [`print_out`]: `Result<()>`.
macro_rules! out {
    ($($arg:tt)*) => {
        print_out(format_args!($($arg)*))
    };
}

/// `println!` through [`print_out`]: `Result<()>`.
macro_rules! outln {
    ($($arg:tt)*) => {
        print_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// The process allocator. The data plane allocates small, short-lived
/// buffers and messages per request; mimalloc serves those with less
/// locking and fragmentation than the C library's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// uagate: OPC UA edge gateway.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Data directory (SQLite database, PKI), private to this user (mode
    /// 0700). `run`, `demo` and `witness` lock it: one of them per
    /// directory at a time; the other commands work beside it.
    #[arg(
        long,
        env = "UAGATE_DATA",
        default_value = "./uagate-data",
        global = true
    )]
    data: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway with the stored configuration (defaults when none was imported).
    Run,
    /// Run the gateway with an embedded demo configuration and two simulated
    /// field servers forming a hot redundant pair, mounted under Objects/plant.
    Demo {
        /// Address of the gateway's opc.tcp listener (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:4840")]
        listen: std::net::SocketAddr,
    },
    /// Run a standalone simulated field server.
    Sim {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:4841")]
        listen: std::net::SocketAddr,
        /// PKI directory of the simulator.
        #[arg(long, default_value = "./uagate-sim-pki")]
        pki: PathBuf,
    },
    /// Manage console and OPC UA users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage the certificate trust list.
    Trust {
        #[command(subcommand)]
        command: TrustCommand,
    },
    /// Import or export the configuration document.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Show or replace the TLS certificate of the opc.wss/opc.https listener
    /// (distinct from the OPC UA application instance certificate).
    Tls {
        #[command(subcommand)]
        command: TlsCommand,
    },
    /// The appliance pair: invite a second appliance, join one, show the
    /// pair. These talk to the gateway running on the same data directory.
    Pair {
        #[command(subcommand)]
        command: PairCommand,
    },
    /// Run a witness: a small third voter for a pair of appliances (no OPC
    /// UA, no console). Join it to the pair like an appliance (`uagate
    /// --data DIR pair join HOST:PORT CODE` while it runs); with it the
    /// pair elects its configuration leader by itself.
    Witness {
        /// Address of its pair listener.
        #[arg(long, default_value = "0.0.0.0:4850")]
        listen: std::net::SocketAddr,
        /// `host:port` the appliances reach it at (default: the listener's
        /// address).
        #[arg(long)]
        advertise: Option<String>,
    },
    /// Print the resource-isolation plan, one line per stage; exit code 2
    /// with a message naming the setting when the configuration cannot be planned.
    Plan {
        /// A TOML configuration document (default: the stored configuration).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum PairCommand {
    /// Print a one-time pairing code (valid 10 minutes, single use) and the
    /// fingerprint of this appliance's pair certificate:
    /// `PAIRING CODE <code> FINGERPRINT <sha256 hex>`.
    Invite,
    /// Join the appliance at HOST:PORT (its pair listener) with the code it
    /// printed; this appliance becomes its standby and takes its
    /// configuration. Exit code 0 once joined.
    Join {
        /// The inviting appliance's pair listener.
        addr: String,
        /// The pairing code it printed.
        code: String,
    },
    /// `role=primary|standby|standalone leader=HOST:PORT epoch=N applied=N …`.
    Status,
    /// Leave the pair: on the standby (or witness) it becomes standalone
    /// again (keeping the configuration it had) and the primary drops it;
    /// on the primary the other appliance is dropped (the witness stays;
    /// with only the witness left, the witness is dropped). Prints `LEFT`.
    /// Exit code 3 (after `LEFT`) when this appliance left but the primary
    /// could not be told: run `uagate pair leave` on the primary then.
    Leave,
    /// Make this standby the leader when the primary is lost (pair without
    /// witness): a new epoch; the old primary steps down when it returns
    /// and lists what it changed meanwhile as diverged. Prints
    /// `PROMOTED epoch=N`.
    Promote {
        /// Confirm: the primary's changes this standby never got are set
        /// aside.
        #[arg(long)]
        force: bool,
    },
    /// List the changes this appliance made that a later primary never got
    /// (it stepped down after a forced promotion), one line each:
    /// `superseded_by=N index=N kind=K subject="…" actor=A at=T`.
    Diverged {
        /// After listing them: they are reviewed, remove them from the
        /// list (prints `CLEARED n`).
        #[arg(long)]
        clear: bool,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Add a user; the password is read from standard input (first line).
    Add {
        /// Login name.
        name: String,
        /// Role of the user.
        #[arg(long, value_enum)]
        role: RoleArg,
    },
    /// List users and their roles.
    List,
    /// Remove a user; the last admin cannot be removed (exit code 2).
    Remove {
        /// Login name (any case).
        name: String,
    },
    /// Change a user's role; the last admin cannot be demoted (exit code 2).
    Role {
        /// Login name (any case).
        name: String,
        /// The new role.
        #[arg(long, value_enum)]
        role: RoleArg,
    },
    /// Set a user's password (a reset, e.g. for a forgotten one): the new
    /// one is read from standard input (first line). Ends the user's
    /// console and OPC UA sessions.
    Password {
        /// Login name (any case).
        name: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum RoleArg {
    Admin,
    Operator,
    Viewer,
}

#[derive(Subcommand)]
enum TrustCommand {
    /// Trust a certificate file (PEM or DER); takes effect without restart.
    Add {
        /// Certificate file.
        file: PathBuf,
        /// Add as an issuer (CA) certificate instead of an application certificate.
        #[arg(long)]
        issuer: bool,
    },
    /// List trusted certificates: `<thumbprint> <subject> <application-uri>`.
    List,
    /// List rejected certificates awaiting a decision, same format.
    Rejected,
    /// Remove a certificate from the trusted, issuer or rejected list.
    Remove {
        /// Its thumbprint as `trust list` prints it (any case, `:` allowed).
        thumbprint: String,
    },
    /// Trust a rejected certificate: it moves from the rejected list to the
    /// trusted one (the console's "Trust"); takes effect without restart.
    Approve {
        /// Its thumbprint as `trust rejected` prints it (any case, `:` allowed).
        thumbprint: String,
    },
}

#[derive(Subcommand)]
enum TlsCommand {
    /// Print subject, SANs, validity and SHA-256 fingerprint of the TLS
    /// certificate; creates a self-signed one first when there is none yet.
    Show,
    /// Validate a PEM certificate chain (leaf first) and its PEM private key
    /// and install them; a running gateway picks them up without a restart.
    /// Exit code 2 with a message naming the problem when they are refused.
    Set {
        /// The certificate chain (PEM, leaf first).
        cert: PathBuf,
        /// The private key (PEM).
        key: PathBuf,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a TOML configuration document and store it (used at the next start):
    /// `[listen]` and `server.application_uri` in this appliance's own overlay, the
    /// rest in the document replicated to a standby.
    Import {
        /// The TOML file.
        file: PathBuf,
    },
    /// Print the stored configuration document (the replicated document with this
    /// appliance's own settings merged in).
    Export,
}

use uagate_server::config_store::{self, ConfigStoreError};
/// The actor recorded in the change log for CLI changes.
const CLI_ACTOR: &str = "cli";

/// The demo's own data directory, under the data directory.
const DEMO_DIR: &str = "demo";
/// The file that marks [`DEMO_DIR`] as the demo's (it is only ever
/// removed when it carries it).
const DEMO_MARK: &str = ".uagate-demo";

/// Takes the lock on the demo's data directory `DATA/demo` (see
/// [`datadir::DataDirLock`]), empties (or creates) it and returns it with
/// the lock. Refuses a `demo` directory that the demo did not make, and
/// one that a running demo (or gateway) holds, before anything in it is
/// touched.
fn rebuild_demo_dir(data: &Path) -> Result<(PathBuf, datadir::DataDirLock)> {
    let dir = data.join(DEMO_DIR);
    if dir.exists() && !dir.join(DEMO_MARK).exists() {
        anyhow::bail!(
            "{} exists but was not made by `uagate demo`; the demo rebuilds that directory \
             at every start, so move it away or choose another --data",
            dir.display()
        );
    }
    datadir::prepare(data)?;
    let lock = datadir::DataDirLock::acquire(&dir)?;
    std::fs::write(
        dir.join(DEMO_MARK),
        "uagate demo data: rebuilt at every `uagate demo` start\n",
    )
    .with_context(|| format!("cannot mark the demo directory {}", dir.display()))?;
    // Everything but the lock (held) and the mark.
    let entries = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read the demo directory {}", dir.display()))?;
    for entry in entries {
        let entry =
            entry.with_context(|| format!("cannot read the demo directory {}", dir.display()))?;
        let name = entry.file_name();
        if name == datadir::LOCK_FILE || name == DEMO_MARK {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("cannot empty the demo directory: {}", path.display()))?;
    }
    Ok((dir, lock))
}

/// The demo's start-up box: where to connect, how to log in to the
/// console, what to watch and what may be written.
fn demo_box(started: &Started, sims: &[String], data: &Path) -> String {
    let console = match started.setup_code {
        Some(code) => format!(
            "{} (first open {}setup, enter the setup code {code} and choose an admin)",
            started.console, started.console
        ),
        None => started.console.to_string(),
    };
    let lines = [
        "uagate demo".to_string(),
        format!("OPC UA    {} (anonymous reads)", started.opc_tcp),
        format!("Console   {console}"),
        format!(
            "Watch     Objects/plant/Simulation: Counter (+1 every 0.5 s), Sine, Random; \
             the pair: Objects/Gateway/FieldConnections/plant ({} and {}, hot)",
            sims.first().map(String::as_str).unwrap_or("-"),
            sims.get(1).map(String::as_str).unwrap_or("-")
        ),
        "Write     Objects/plant/Simulation/Setpoint (Double), as a user with the operator \
         or admin role (add one on the console's Users page)"
            .to_string(),
        format!(
            "Data      {} (rebuilt at every demo start; nothing of `uagate run` is touched)",
            data.display()
        ),
    ];
    let mut out = String::from("+--------------------------------------------------------------\n");
    for line in lines {
        out.push_str("| ");
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("+--------------------------------------------------------------\n");
    out
}

/// The demo configuration compiled into the binary.
const DEMO_CONFIG: &str = r#"
[server]
application_name = "uagate-demo"
demo_nodes = true
"#;

/// Refuses a data directory that does not exist, for a command that only
/// reads it (`user list`, `trust list`, `config export`, `plan`): a
/// mistyped `--data` would otherwise create an empty store and print
/// defaults as if they were the appliance's.
fn existing(data: &Path) -> Result<()> {
    if data.is_dir() {
        return Ok(());
    }
    bail!(
        "{}: no such data directory (check --data or UAGATE_DATA; `uagate run` creates it)",
        data.display()
    )
}

/// Exit code of a change the store refused as such: an unknown user or
/// certificate, the last admin, an invalid name, password or thumbprint
/// (like `plan` and `tls set` refusing their input). Other failures (a
/// paired appliance whose gateway is not running, a standby naming its
/// primary) exit 1.
const REFUSED_EXIT: i32 = 2;

/// What a refusal of the store says on the command line: its own words,
/// which name the user or certificate ("no user named \"otto\"", "cannot
/// remove ada, the last admin (...)"), a password's fault as "the password
/// must ...".
fn refusal(e: &uagate_store::StoreError) -> String {
    match e {
        uagate_store::StoreError::Invalid { setting, message } if setting == "password" => {
            format!("the password {message}")
        }
        uagate_store::StoreError::Invalid { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// The outcome of a change a CLI command asked the store for: a refusal
/// (see [`REFUSED_EXIT`]) is printed as one line, `uagate COMMAND: why`
/// (`why` as `say` puts it, e.g. [`refusal`]), and ends the process with
/// exit code 2; any other error is returned (exit 1).
fn unless_refused<T>(
    command: &str,
    result: Result<T, uagate_store::StoreError>,
    say: impl FnOnce(&uagate_store::StoreError) -> String,
) -> Result<T> {
    match result {
        Err(e) if e.is_refusal() => {
            eprintln!("uagate {command}: {}", say(&e));
            std::process::exit(REFUSED_EXIT);
        }
        other => Ok(other?),
    }
}

/// The first line of standard input: the password of `user add` and
/// `user password`.
fn read_password() -> Result<String> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("cannot read the password from standard input")?;
    Ok(input.lines().next().unwrap_or_default().to_string())
}

/// A `--role` argument as the store's role.
fn role_of(role: RoleArg) -> Role {
    match role {
        RoleArg::Admin => Role::Admin,
        RoleArg::Operator => Role::Operator,
        RoleArg::Viewer => Role::Viewer,
    }
}

/// The store in `data` (created, and the directory with it, private to
/// this user: see [`datadir::prepare`]).
async fn open_store(data: &Path) -> Result<Store> {
    datadir::prepare(data)?;
    Ok(Store::open(&data.join("uagate.db")).await?)
}

/// The store for a CLI command that changes it: while a gateway runs on
/// `data`, its replicated changes go to that gateway's pair node (and so
/// through the pair's log), like the console's; on a paired appliance
/// whose gateway is not running they are refused.
async fn open_store_for_change(data: &Path) -> Result<Store> {
    let store = open_store(data).await?;
    let dir = data.join(PAIR_DIR);
    if let Ok(addr) = std::fs::read_to_string(dir.join(PAIR_ADDR_FILE)) {
        if let Ok(identity) = uagate_pair::tls::Identity::load_or_create(&dir, "cli") {
            if let Some(r) =
                uagate_pair::node::AdminReplicator::connect(identity, addr.trim()).await
            {
                store.set_replicator(Some(std::sync::Arc::new(r)));
                return Ok(store);
            }
        }
    }
    // No gateway answers: a standalone appliance's store takes the change
    // directly; a paired one's must not (see PairedOffline).
    if uagate_pair::node::is_paired(&dir, &store).await? {
        store.set_replicator(Some(std::sync::Arc::new(uagate_pair::node::PairedOffline)));
    }
    Ok(store)
}

/// The stored configuration (the replicated document with this
/// appliance's overlay merged over it), or the defaults when none was
/// imported. Called by `run`, `config import` (the document before) and
/// `config export`.
async fn load_config(store: &Store) -> Result<Config> {
    Ok(config_store::load(store)
        .await
        .context("stored configuration is invalid")?
        .unwrap_or_default())
}

async fn wait_for_stop() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// What a started gateway tells the demo for its start-up box.
struct Started<'a> {
    /// The opc.tcp endpoint URL.
    opc_tcp: &'a str,
    /// The console's URL.
    console: &'a str,
    /// The one-time setup code while no console user exists.
    setup_code: Option<&'a str>,
}

/// What the demo prints once its gateway serves (see [`serve`]).
type Welcome = Box<dyn FnOnce(&Started) -> Result<()>>;

/// Runs the gateway on `data` with `config` until SIGTERM or Ctrl-C:
/// `uagate run`, and `uagate demo` with `welcome`, which prints its box
/// once everything listens (and the setup code, logged otherwise).
async fn serve(data: &Path, config: Config, store: Store, welcome: Option<Welcome>) -> Result<()> {
    // The isolation plan is validated (and logged, one line per stage)
    // before anything listens; enforcement uses it in a later release.
    let plan = uagate_isolation::plan::Plan::build(&config)
        .map_err(|e| anyhow::anyhow!("configuration cannot be planned: {e}"))?;
    plan.log();
    let console_addr = config.listen.console_addr();
    let metrics_addr = config.listen.metrics;
    // The console's listener early: the pair tells the others its URL.
    let console = tokio::net::TcpListener::bind(console_addr)
        .await
        .with_context(|| format!("cannot listen for the console on {console_addr}"))?;
    let console_url = format!("https://{}/", console.local_addr()?);
    let console_public = match &config.listen.public_host {
        Some(h) => format!("https://{h}:{}/", console.local_addr()?.port()),
        None => console_url.clone(),
    };
    // The pair node first: from here on every replicated change of the
    // store goes through the pair's log.
    let pair_listen = config.listen.pair_addr();
    let advertise = config
        .listen
        .public_host
        .as_ref()
        .map(|h| format!("{h}:{}", pair_listen.port()))
        .filter(|_| pair_listen.port() != 0);
    let pair = uagate_pair::PairNode::start(
        uagate_pair::NodeSettings {
            dir: data.join(PAIR_DIR),
            name: config
                .server
                .application_uri
                .clone()
                .unwrap_or_else(|| "uagate".into()),
            listen: pair_listen,
            advertise,
            application_uri: uagate_server::application_uri(&config, &uagate_server::host_name()),
            witness: false,
            console: console_public,
        },
        store.clone(),
    )
    .await
    .with_context(|| format!("cannot start the pair listener on {pair_listen}"))?;
    // Where the CLI finds it (the port may be ephemeral).
    std::fs::write(
        data.join(PAIR_DIR).join(PAIR_ADDR_FILE),
        pair.local_addr().to_string(),
    )
    .context("cannot record the pair listener's address")?;
    let gateway = uagate_server::start(config, store.clone(), data).await?;
    // Maintenance hands the configuration leadership over first.
    let handing = std::sync::Arc::downgrade(&pair);
    gateway
        .engine
        .set_handover(uagate_server::level::handover(move |entering| {
            let pair = handing.clone();
            async move {
                let pair = pair.upgrade()?;
                if !entering {
                    pair.set_maintenance(false).await;
                    return None;
                }
                pair.hand_over(uagate_pair::HANDOVER_TIMEOUT).await.note()
            }
        }));
    let pair_task = tokio::spawn(follow_pair(
        pair.clone(),
        gateway.engine.clone(),
        gateway.cancel_token(),
    ));
    // The console: its own HTTPS listener with the appliance certificate.
    // The System page's updater: where RAUC, the os-release file and the
    // reboot request file are (UAGATE_RAUC, UAGATE_OS_RELEASE,
    // UAGATE_REBOOT_REQUEST, read once here; the appliance's defaults).
    let mut web = uagate_web::WebState::new(store, gateway.engine.clone(), data)
        .context("cannot prepare the console token key")?
        .with_system(uagate_system::Settings::from_env(), data)
        // The appliance image shows the setup code at its login prompt.
        .with_setup_notice(
            std::env::var_os("UAGATE_SETUP_ISSUE").map(std::path::PathBuf::from),
            console.local_addr()?.port(),
        );
    web.pair = Some(pair.clone());
    let setup_code = web.prepare_setup().await?;
    if let (Some(code), None) = (&setup_code, &welcome) {
        // The one-time code is meant to be read here (the log and the
        // terminal); it stops working once the first admin exists.
        tracing::warn!(
            "no console user yet: open {console_url}setup and enter the setup code {code} \
             (or POST {console_url}api/v1/setup {{\"code\", \"username\", \"password\"}}, \
             or run `uagate user add NAME --role admin`)"
        );
    }
    let tls = gateway
        .engine
        .tls_server_config()
        .context("the TLS certificate is not loaded")?;
    // The unauthenticated scrape listener, only where configured.
    let scrape = match metrics_addr {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for metrics scrapes on {addr}"))?,
        ),
        None => None,
    };
    let scrape_url = match &scrape {
        Some(l) => Some(format!("http://{}/metrics", l.local_addr()?)),
        None => None,
    };
    let scrape_task = scrape.map(|listener| {
        let cancel = gateway.cancel_token();
        let app = uagate_web::metrics::scrape_app(web.clone());
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { cancel.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "metrics listener failed");
            }
        })
    });
    let console_task = tokio::spawn(uagate_web::serve_tls(
        console,
        tls,
        uagate_web::app(web),
        gateway.cancel_token(),
    ));
    // READY stays the first line (scripts read it); the TLS endpoints follow.
    outln!("READY opc.tcp={}", gateway.endpoint_url)?;
    outln!(
        "TLS opc.wss={} opc.https={}",
        gateway.wss_url,
        gateway.https_url
    )?;
    outln!("CONSOLE {console_url}")?;
    if let Some(url) = &scrape_url {
        outln!("METRICS {url}")?;
    }
    outln!(
        "PAIR {} FINGERPRINT {}",
        pair.local_addr(),
        pair.fingerprint()
    )?;
    if let Some(welcome) = welcome {
        welcome(&Started {
            opc_tcp: &gateway.endpoint_url,
            console: &console_url,
            setup_code: setup_code.as_deref(),
        })?;
    }
    // Under systemd (Type=notify): ready now, and the watchdog fed while
    // the gateway's housekeeping goes round.
    systemd::ready(&format!(
        "serving {} and {console_url}",
        gateway.endpoint_url
    ));
    let watchdog = systemd::watchdog_period().map(|period| {
        tokio::spawn(systemd::watchdog(
            gateway.engine.clone(),
            period,
            gateway.cancel_token(),
        ))
    });
    wait_for_stop().await;
    systemd::stopping();
    gateway.shutdown().await;
    if let Some(w) = watchdog {
        let _ = w.await;
    }
    let _ = pair_task.await;
    pair.stop().await;
    let _ = console_task.await;
    if let Some(t) = scrape_task {
        let _ = t.await;
    }
    Ok(())
}

/// The pair directory in the data directory.
const PAIR_DIR: &str = "pair";
/// File in the pair directory holding the running pair listener's address.
const PAIR_ADDR_FILE: &str = "listen";

/// Every second until `cancel`: tells the engine this appliance's role in
/// the pair and whether replication stopped on an integrity fault (they
/// feed the computed ServiceLevel).
async fn follow_pair(
    pair: std::sync::Arc<uagate_pair::PairNode>,
    engine: std::sync::Arc<uagate_server::Engine>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Ok(status) = pair.status().await else {
            continue;
        };
        pair.follow_maintenance(engine.in_maintenance()).await;
        let role = match status.role {
            uagate_pair::PairRole::Standalone => uagate_server::level::PairRole::Standalone,
            uagate_pair::PairRole::Primary => uagate_server::level::PairRole::Leader,
            uagate_pair::PairRole::Standby | uagate_pair::PairRole::Witness => {
                uagate_server::level::PairRole::Standby
            }
        };
        engine.set_pair_view(uagate_server::level::PairView {
            role,
            node_id: status.node_id,
            leader: status.leader,
            epoch: status.epoch,
            applied: status.applied,
            committed: status.committed,
            fingerprint: status.fingerprint,
            members: status
                .members
                .into_iter()
                .map(|m| uagate_server::level::PairMember {
                    node_id: m.node_id,
                    addr: m.addr,
                    voter: m.voter,
                    application_uri: m.application_uri,
                    witness: m.witness,
                    console: m.console,
                    lag_entries: m.lag_entries,
                    lag_seconds: m.lag_seconds,
                    reachable: m.reachable,
                })
                .collect(),
            diverged: status
                .diverged
                .into_iter()
                .map(|d| uagate_server::level::PairDiverged {
                    superseded_by: d.superseded_by,
                    index: d.index,
                    kind: d.kind,
                    subject: d.subject,
                    actor: d.actor,
                    at: d.at,
                })
                .collect(),
            integrity_fault: status.integrity_fault,
            quorum_lost: status.quorum_lost,
            stepping_down: status.stepping_down,
        });
    }
}

/// `uagate witness`: the pair node alone, on its own store in `data`,
/// until stopped. Prints `PAIR HOST:PORT FINGERPRINT <sha256 hex>`.
async fn witness(
    data: &Path,
    listen: std::net::SocketAddr,
    advertise: Option<String>,
) -> Result<()> {
    let _lock = datadir::DataDirLock::acquire(data)?;
    let store = open_store(data).await?;
    let pair = uagate_pair::PairNode::start(
        uagate_pair::NodeSettings {
            dir: data.join(PAIR_DIR),
            name: "uagate-witness".into(),
            listen,
            advertise,
            application_uri: String::new(),
            witness: true,
            console: String::new(),
        },
        store,
    )
    .await
    .with_context(|| format!("cannot start the pair listener on {listen}"))?;
    std::fs::write(
        data.join(PAIR_DIR).join(PAIR_ADDR_FILE),
        pair.local_addr().to_string(),
    )
    .context("cannot record the pair listener's address")?;
    outln!(
        "PAIR {} FINGERPRINT {}",
        pair.local_addr(),
        pair.fingerprint()
    )?;
    tracing::info!("witness running; join it to the pair with `uagate pair join`");
    wait_for_stop().await;
    pair.stop().await;
    Ok(())
}

/// Exit code of `uagate pair leave` when this appliance left but the
/// primary was not told (it still lists this appliance).
const PAIR_LEAVE_UNTOLD_EXIT: i32 = 3;

/// `uagate pair …`: asks the gateway running on `data` through its pair
/// listener, with the appliance's own pair certificate.
async fn pair_command(data: &Path, command: PairCommand) -> Result<()> {
    use uagate_pair::wire::{AdminRequest, AdminResponse};
    let dir = data.join(PAIR_DIR);
    let addr = std::fs::read_to_string(dir.join(PAIR_ADDR_FILE)).with_context(|| {
        format!(
            "no gateway has run on {} yet (start `uagate run` first)",
            data.display()
        )
    })?;
    let identity = uagate_pair::tls::Identity::load_or_create(&dir, "cli")?;
    let addr = addr.trim();
    let request = match &command {
        PairCommand::Invite => AdminRequest::Invite,
        PairCommand::Join { addr, code } => AdminRequest::Join {
            addr: addr.clone(),
            code: code.clone(),
        },
        PairCommand::Status => AdminRequest::Status,
        PairCommand::Leave => AdminRequest::Leave,
        PairCommand::Promote { force } => AdminRequest::Promote { force: *force },
        PairCommand::Diverged { clear } => return pair_diverged(&identity, addr, *clear).await,
    };
    match ask_gateway(&identity, addr, request).await? {
        AdminResponse::Invite { code, fingerprint } => {
            outln!("PAIRING CODE {code} FINGERPRINT {fingerprint}")
        }
        AdminResponse::Joined {
            leader,
            fingerprint,
        } => outln!("JOINED leader={leader} FINGERPRINT {fingerprint}"),
        AdminResponse::Status(status) => outln!("{}", status.line()),
        AdminResponse::Proposed(r) => outln!("{r:?}"),
        AdminResponse::Left => outln!("LEFT"),
        AdminResponse::LeftUntold { primary, reason } => {
            // This appliance did leave; the primary still lists it.
            outln!("LEFT")?;
            match primary {
                Some(addr) => eprintln!(
                    "uagate pair leave: the primary ({addr}) was not told: {reason}. It still \
                     lists this appliance: run `uagate pair leave` on the primary."
                ),
                None => eprintln!(
                    "uagate pair leave: no primary was told ({reason}). Run `uagate pair leave` \
                     on the primary to drop this appliance there."
                ),
            }
            std::process::exit(PAIR_LEAVE_UNTOLD_EXIT);
        }
        AdminResponse::Promoted { epoch } => outln!("PROMOTED epoch={epoch}"),
        AdminResponse::DivergedCleared { count } => outln!("CLEARED {count}"),
    }
}

/// `uagate pair diverged [--clear]`: lists the diverged changes and, with
/// `clear`, removes the listed ones from the list.
async fn pair_diverged(
    identity: &uagate_pair::tls::Identity,
    addr: &str,
    clear: bool,
) -> Result<()> {
    use uagate_pair::wire::{AdminRequest, AdminResponse};
    let AdminResponse::Status(status) = ask_gateway(identity, addr, AdminRequest::Status).await?
    else {
        anyhow::bail!("the gateway answered the status request with something else");
    };
    for d in &status.diverged {
        outln!(
            "superseded_by={} index={} kind={} subject={:?} actor={} at={}",
            d.superseded_by,
            d.index,
            d.kind,
            d.subject,
            d.actor,
            d.at
        )?;
    }
    if clear {
        let request = AdminRequest::ClearDiverged {
            count: status.diverged.len(),
        };
        if let AdminResponse::DivergedCleared { count } =
            ask_gateway(identity, addr, request).await?
        {
            outln!("CLEARED {count}")?;
        }
    }
    Ok(())
}

/// Sends one administrative request to the gateway running on this data
/// directory (its pair listener at `addr`). Called by every `uagate pair`
/// command.
async fn ask_gateway(
    identity: &uagate_pair::tls::Identity,
    addr: &str,
    request: uagate_pair::wire::AdminRequest,
) -> Result<uagate_pair::wire::AdminResponse> {
    // The hint only when this appliance's own gateway did not answer: a
    // refusal from it (or relayed from the other appliance) says why.
    uagate_pair::node::admin(identity, addr, request)
        .await
        .map_err(|e| match e {
            uagate_pair::PairError::LocalNode(_) => {
                anyhow::anyhow!("{e} (is `uagate run` running on this data directory?)")
            }
            e => anyhow::anyhow!("{e}"),
        })
}

/// What a refusal of a change by thumbprint says, naming the thumbprint as
/// the operator typed it: "no rejected certificate with thumbprint X" for
/// an unknown one (`what` names the lists looked in), "X is not a
/// thumbprint: ..." for one that is not 40 hex digits.
fn thumbprint_refusal(e: &uagate_store::StoreError, thumbprint: &str, what: &str) -> String {
    use uagate_store::StoreError;
    match e {
        StoreError::UnknownCert(_) => format!("no {what} with thumbprint {thumbprint}"),
        StoreError::Invalid { setting, message } if setting == "thumbprint" => {
            format!("{thumbprint:?} is not a thumbprint: {message}")
        }
        other => refusal(other),
    }
}

/// `trust list` / `trust rejected`: `<thumbprint> <subject>
/// <application-uri|->`, one line per certificate.
fn certs_text(certs: &[uagate_store::CertInfo]) -> String {
    certs
        .iter()
        .map(|c| {
            format!(
                "{} {} {}\n",
                c.thumbprint,
                c.subject,
                c.application_uri.as_deref().unwrap_or("-")
            )
        })
        .collect()
}

/// `tls show` / `tls set`: the certificate's subject, SANs, validity and
/// fingerprint, one `key: value` line each.
fn tls_text(info: &uagate_server::tls_cert::TlsInfo) -> String {
    format!(
        "subject: {}\nsans: {}\nnot_before: {}\nnot_after: {}\nsha256: {}\n",
        info.subject,
        info.sans.join(", "),
        info.not_before,
        info.not_after,
        info.fingerprint
    )
}

/// `uagate tls set`: refused input leaves the stored pair untouched.
fn tls_set(data: &Path, cert: &Path, key: &Path) -> Result<uagate_server::tls_cert::TlsInfo> {
    datadir::prepare(data)?;
    let cert_pem =
        std::fs::read(cert).with_context(|| format!("cannot read {}", cert.display()))?;
    let key_pem = std::fs::read(key).with_context(|| format!("cannot read {}", key.display()))?;
    Ok(uagate_server::tls_cert::install(
        data,
        &cert_pem,
        &key_pem,
        std::time::SystemTime::now().into(),
    )?)
}

/// Task polls between two checks of socket readiness. Tokio's default (61)
/// lets a busy server notice a connection's new bytes only after dozens of
/// other tasks ran, which favours owners whose work is already queued over
/// owners whose next request is still on the wire; resource isolation
/// shares the server between owners, so readiness is checked more often.
const EVENT_INTERVAL: u32 = 4;

fn main() -> std::process::ExitCode {
    // Before any thread: nothing this process creates is for others.
    uagate_store::files::private_umask();
    let interval = std::env::var("UAGATE_EVENT_INTERVAL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(EVENT_INTERVAL);
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .event_interval(interval)
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| runtime.block_on(run()));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The message and its causes, one line: an operator's mistake (a
        // refused setting, a missing file) is not a crash, so no stack
        // backtrace even when RUST_BACKTRACE is set.
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The log filter when `RUST_LOG` is not set (the appliance's unit does not
/// set it). openraft narrates every election and replication step at info,
/// and async-opcua's client session loop warns "Transport disconnected:
/// Good" for every field session the gateway closes itself: the pair's and
/// the field links' own lines ("field session lost", "field keep-alives
/// failed") say what an operator needs, so those two speak only of errors.
/// openraft's replication also logs two or three lines for every message
/// that fails (every 500 ms per member that is down or refuses): the
/// pair's own lines say it once, then once a minute, and when it is over.
const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,openraft::replication=off,\
     openraft::engine::handler::replication_handler=error,\
     opcua_client::session::event_loop=error";

async fn run() -> Result<()> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| DEFAULT_LOG_FILTER.into()),
        )
        // Colours only for a person at a terminal: the journal stores a
        // line with escape codes as binary ("[blob data]" in journalctl).
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Run => {
            let _lock = datadir::DataDirLock::acquire(&cli.data)?;
            let store = open_store(&cli.data).await?;
            let config = load_config(&store).await?;
            serve(&cli.data, config, store, None).await
        }
        Command::Demo { listen } => {
            // The demo's own data directory, rebuilt at every start: what
            // is changed in its console never reaches `uagate run` on the
            // data directory, nor the next demo.
            let (data, _lock) = rebuild_demo_dir(&cli.data)?;
            let store = open_store(&data).await?;
            // The gateway's certificate first, so that its simulators trust
            // it from the start (and it theirs, below): the demo's parts
            // know each other without warnings about unknown certificates.
            let gateway_cert = uagate_server::prepare_instance_certificate(
                &Config::from_toml(&format!("[listen]\nopc_tcp = \"{listen}\"\n{DEMO_CONFIG}"))?,
                &data,
            )?;
            // Two simulated field servers forming a hot redundant pair.
            let mut sims = Vec::new();
            for name in ["a", "b"] {
                uagate_server::pki::place_trusted(
                    &data.join(format!("sim-pki-{name}")),
                    &gateway_cert,
                )?;
                let sim = uagate_sim::start(uagate_sim::SimConfig {
                    listen: ([127, 0, 0, 1], 0).into(),
                    pki_dir: data.join(format!("sim-pki-{name}")),
                    application_uri: format!("urn:uagate:sim:{name}"),
                    ..Default::default()
                })
                .await?;
                // They are the hot pair the demo declares.
                sim.set_redundancy_support(uagate_sim::RedundancySupport::Hot);
                // The demo trusts its own in-process simulators' certificates.
                let cert = std::fs::read(data.join(format!("sim-pki-{name}/own/cert.der")))
                    .context("cannot read the simulator certificate")?;
                store.trust_add(CLI_ACTOR, &cert, CertKind::Trusted).await?;
                uagate_server::pki::place_trusted(&data.join("pki"), &cert)?;
                sims.push(sim);
            }
            let mut text = format!("[listen]\nopc_tcp = \"{listen}\"\n{DEMO_CONFIG}");
            text.push_str(&format!(
                "\n[[field_servers]]\nname = \"plant\"\nendpoints = [\"{}\", \"{}\"]\nredundancy = \"hot\"\n",
                sims[0].endpoint_url, sims[1].endpoint_url
            ));
            let config = Config::from_toml(&text)?;
            let sim_urls: Vec<String> = sims.iter().map(|s| s.endpoint_url.clone()).collect();
            let shown = data.clone();
            let welcome: Welcome = Box::new(move |started: &Started| {
                out!("{}", demo_box(started, &sim_urls, &shown))
            });
            let r = serve(&data, config, store, Some(welcome)).await;
            for sim in sims {
                sim.cancel();
            }
            r
        }
        Command::Sim { listen, pki } => {
            let sim = uagate_sim::start(uagate_sim::SimConfig {
                listen,
                pki_dir: pki,
                ..Default::default()
            })
            .await?;
            outln!("READY opc.tcp={}", sim.endpoint_url)?;
            wait_for_stop().await;
            sim.cancel();
            sim.stopped().await;
            Ok(())
        }
        Command::User { command } => {
            // Only `add` may start a store; the others need one.
            if !matches!(command, UserCommand::Add { .. }) {
                existing(&cli.data)?;
            }
            let store = open_store_for_change(&cli.data).await?;
            match command {
                UserCommand::Add { name, role } => {
                    let password = read_password()?;
                    let role = role_of(role);
                    // As stored: without white space around it, in NFC.
                    let name = store.add_user(CLI_ACTOR, &name, &password, role).await?;
                    outln!("user {name} added as {role}")?;
                }
                UserCommand::List => {
                    let users: String = store
                        .list_users()
                        .await?
                        .into_iter()
                        .map(|(name, role)| format!("{name} {role}\n"))
                        .collect();
                    out!("{users}")?;
                }
                UserCommand::Remove { name } => {
                    let removed = store.delete_user(CLI_ACTOR, &name).await;
                    unless_refused("user remove", removed, refusal)?;
                    outln!("user {name} removed")?;
                }
                UserCommand::Role { name, role } => {
                    let role = role_of(role);
                    let changed = store.set_role(CLI_ACTOR, &name, role).await;
                    unless_refused("user role", changed, refusal)?;
                    outln!("user {name} is now {role}")?;
                }
                UserCommand::Password { name } => {
                    let password = read_password()?;
                    let set = store.set_password(CLI_ACTOR, &name, &password).await;
                    unless_refused("user password", set, refusal)?;
                    outln!("password of {name} set; their console and OPC UA sessions have ended")?;
                }
            }
            Ok(())
        }
        Command::Trust { command } => {
            // Only `add` may start a store; the others need one.
            if !matches!(command, TrustCommand::Add { .. }) {
                existing(&cli.data)?;
            }
            let store = open_store_for_change(&cli.data).await?;
            match command {
                TrustCommand::Add { file, issuer } => {
                    let bytes = std::fs::read(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?;
                    let kind = if issuer {
                        CertKind::Issuer
                    } else {
                        CertKind::Trusted
                    };
                    let info = store.trust_add_pem_or_der(CLI_ACTOR, &bytes, kind).await?;
                    outln!("trusted {} {}", info.thumbprint, info.subject)?;
                }
                TrustCommand::List => out!(
                    "{}{}",
                    certs_text(&store.certs(CertKind::Trusted).await?),
                    certs_text(&store.certs(CertKind::Issuer).await?)
                )?,
                TrustCommand::Rejected => {
                    out!("{}", certs_text(&store.certs(CertKind::Rejected).await?))?
                }
                TrustCommand::Remove { thumbprint } => {
                    let removed = store.trust_remove(CLI_ACTOR, &thumbprint).await;
                    unless_refused("trust remove", removed, |e| {
                        thumbprint_refusal(e, &thumbprint, "certificate")
                    })?;
                    outln!("removed {thumbprint}")?;
                }
                TrustCommand::Approve { thumbprint } => {
                    let approved = store.approve_rejected(CLI_ACTOR, &thumbprint).await;
                    let info = unless_refused("trust approve", approved, |e| {
                        thumbprint_refusal(e, &thumbprint, "rejected certificate")
                    })?;
                    outln!("trusted {} {}", info.thumbprint, info.subject)?;
                }
            }
            Ok(())
        }
        Command::Tls { command } => match command {
            TlsCommand::Show => {
                datadir::prepare(&cli.data)?;
                let identity = uagate_server::tls_cert::TlsIdentity::load_or_create(
                    &cli.data,
                    &uagate_server::tls_cert::default_hosts(),
                )?;
                out!("{}", tls_text(&identity.info()))
            }
            TlsCommand::Set { cert, key } => match tls_set(&cli.data, &cert, &key) {
                Ok(info) => out!(
                    "installed TLS certificate sha256 {}\n{}\
                     a running gateway picks it up within a few seconds without dropping connections\n",
                    info.fingerprint,
                    tls_text(&info)
                ),
                Err(e) => {
                    eprintln!("uagate tls set: {e:#}");
                    std::process::exit(2);
                }
            },
        },
        Command::Pair { command } => pair_command(&cli.data, command).await,
        Command::Witness { listen, advertise } => witness(&cli.data, listen, advertise).await,
        Command::Plan { config } => {
            let config = match config {
                Some(file) => Config::from_toml(
                    &std::fs::read_to_string(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?,
                ),
                // No data directory (yet, or a mistyped --data): the plan
                // of the defaults, said so, and nothing created.
                None if !cli.data.is_dir() => {
                    eprintln!(
                        "uagate plan: {}: no such data directory; this is the plan of the default configuration",
                        cli.data.display()
                    );
                    Ok(Config::default())
                }
                // The stored document with this appliance's overlay.
                None => match config_store::load(&open_store(&cli.data).await?).await {
                    Ok(c) => Ok(c.unwrap_or_default()),
                    Err(ConfigStoreError::Config(e)) => Err(e),
                    Err(e) => return Err(e.into()),
                },
            };
            let plan = config
                .map_err(uagate_isolation::plan::PlanError::from)
                .and_then(|c| uagate_isolation::plan::Plan::build(&c));
            match plan {
                Ok(plan) => {
                    let lines: String = plan.lines().iter().map(|line| format!("{line}\n")).collect();
                    out!("{lines}")
                }
                Err(e) => {
                    eprintln!("uagate plan: {e}");
                    std::process::exit(2);
                }
            }
        }
        Command::Config { command } => {
            if matches!(command, ConfigCommand::Export) {
                existing(&cli.data)?;
            }
            let store = open_store_for_change(&cli.data).await?;
            match command {
                ConfigCommand::Import { file } => {
                    let text = std::fs::read_to_string(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?;
                    let config = match Config::from_toml(&text) {
                        Ok(c) => c,
                        Err(e) => bail!("{e}"),
                    };
                    // A document that validates but cannot be planned is refused too.
                    if let Err(e) = uagate_isolation::plan::Plan::build(&config) {
                        bail!("{e}");
                    }
                    let previous = load_config(&store).await?;
                    let report = match uagate_server::classify_change(&previous, &config) {
                        Ok(r) => r,
                        Err(e) => bail!("{e}"),
                    };
                    // The node-local settings into this appliance's overlay,
                    // the rest into the replicated document, all or nothing.
                    config_store::save(&store, CLI_ACTOR, &config).await?;
                    // What a running gateway on this data directory does with it.
                    let effect = if report.is_empty() {
                        "no setting changed".to_string()
                    } else if report.applies_live() {
                        format!("applied live by a running gateway: {}", report.live.join(", "))
                    } else {
                        format!(
                            "takes effect after a restart (a running gateway applies nothing of this change now): {}",
                            report.restart.join(", ")
                        )
                    };
                    outln!("configuration imported\n{effect}")
                }
                ConfigCommand::Export => out!("{}", load_config(&store).await?.to_toml()),
            }
        }
    }
}
