//! `kmirror mirror ...`: the mirror admin CLI over the KIP-1279 wire APIs (SPEC "CLI
//! contract"). Both the seed names and upstream's names are accepted (`add` = `start`,
//! `remove` = `stop`). Output is a table by default; `--json` prints stable JSON (describe: one
//! object per partition with mirror, topic, partition, state, source_offset,
//! destination_offset, lag, lag_ms, ..., core). Failures exit non-zero with a one-line error.
//!
//! Secrets stay out of shell history and output: `--mirror-config FILE` (a Java properties
//! file) carries a mirror's source credentials (`--set` overrides single keys), `--command-config
//! FILE` the CLI's own TLS/SASL settings for a secured destination (Kafka tools' convention),
//! and the table form of `describe` lists a mirror's settings with secrets shown as `[hidden]`
//! (the broker redacts them before they leave it).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use kmirror_mirror::api::{
    AddTopicsToMirrorRequest, CreateMirrorRequest, DeleteMirrorRequest, DescribeMirrorsRequest,
    DescribeMirrorsResponse, ListMirrorsRequest, MirrorConfig, MirrorTopicsResponse,
    PauseMirrorTopicsRequest, PauseResumeTopics, RemoveTopicsFromMirrorRequest,
    ResumeMirrorTopicsRequest, StartTopic, TopicName, TopicRef,
};
use kmirror_mirror::client::security::{parse_properties, ClientSecurity};
use kmirror_mirror::client::{BlockingConnection, BlockingMirrorCalls};
use kmirror_net::keys::error as code;
use serde::Serialize;

pub(crate) type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(
    name = "kmirror mirror",
    about = "Manage mirrors on a running kmirror broker"
)]
struct MirrorCli {
    /// Destination broker HOST:PORT.
    #[arg(
        long,
        global = true,
        default_value = "127.0.0.1:9092",
        env = "KMIRROR_BOOTSTRAP"
    )]
    bootstrap: String,
    /// Request timeout in milliseconds.
    #[arg(long, global = true, default_value_t = 30_000)]
    request_timeout_ms: u64,
    /// How long to keep retrying while the mirror coordinator moves (COORDINATOR_NOT_AVAILABLE,
    /// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, NOT_CONTROLLER, or a connection lost
    /// mid-request), in milliseconds; 0: no retries.
    #[arg(long, global = true, default_value_t = 60_000)]
    retry_timeout_ms: u64,
    /// Client properties for the destination connection (security.protocol, ssl.*, sasl.*),
    /// as Kafka's tools take them.
    #[arg(long, global = true, value_name = "FILE")]
    command_config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug, Clone)]
enum Cmd {
    /// Create a mirror: a named link to a source cluster.
    Create {
        name: String,
        /// Source cluster bootstrap servers HOST:PORT[,HOST:PORT...].
        #[arg(long)]
        source: String,
        /// Mirror settings from a Java properties file (keeps secrets out of the command line).
        #[arg(long, value_name = "FILE")]
        mirror_config: Option<std::path::PathBuf>,
        /// Extra mirror settings (security, sync intervals, filters), repeatable; override
        /// --mirror-config.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Change a mirror's settings (e.g. rotated credentials); its connections to the source
    /// are re-established with them and mirroring resumes where it was.
    Alter {
        name: String,
        /// Settings to change, from a Java properties file.
        #[arg(long, value_name = "FILE", required_unless_present_any = ["set", "unset"])]
        mirror_config: Option<std::path::PathBuf>,
        /// Settings to change, repeatable; override --mirror-config.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Settings to remove, repeatable.
        #[arg(long = "unset", value_name = "KEY")]
        unset: Vec<String>,
    },
    /// Add topics to a mirror (AddTopicsToMirror; upstream StartMirrorTopics).
    #[command(visible_aliases = ["start", "start-mirror-topics", "add-topics-to-mirror"])]
    Add {
        name: String,
        /// Comma-separated topic names.
        #[arg(long, value_delimiter = ',', required_unless_present = "topic_regex")]
        topics: Vec<String>,
        /// Regex of source topics; new matching topics join automatically.
        #[arg(long)]
        topic_regex: Option<String>,
        /// Regex of source topics to leave out.
        #[arg(long)]
        exclude_regex: Option<String>,
        /// Where each new mirror log starts: `earliest` (the source's log start), `latest`
        /// (only records produced from now on), or an epoch-ms time (the first record at or
        /// after it). From there the mirror has the source's records at the same offsets.
        #[arg(long, value_name = "earliest|latest|MS", value_parser = parse_start, default_value = "earliest")]
        start: i64,
        /// Print what each partition would truncate; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Client properties for the dry run's own connection to the source (a secured
        /// source; the mirror's stored secrets never leave the broker).
        #[arg(long, value_name = "FILE", requires = "dry_run")]
        source_config: Option<std::path::PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Fail over topics: stop mirroring and make them writable (RemoveTopicsFromMirror;
    /// upstream StopMirrorTopics).
    #[command(visible_aliases = ["stop", "stop-mirror-topics", "remove-topics-from-mirror"])]
    #[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["topics", "topic_regex", "all"])))]
    Remove {
        name: String,
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// Fail over every topic of the mirror this regex matches (full match), and let no
        /// topic it matches join the mirror afterwards.
        #[arg(long, value_name = "REGEX")]
        topic_regex: Option<String>,
        /// Fail over every topic of the mirror (regex-joined ones too); no topic joins it
        /// afterwards (`add --topics` brings one back).
        #[arg(long)]
        all: bool,
        /// Fail over only once the broker has mirrored everything the source had committed
        /// when the request arrived (its last stable offset); otherwise fail, changing nothing.
        #[arg(long)]
        wait_for_sync: bool,
        /// Give up waiting for sync after this many milliseconds.
        #[arg(long, default_value_t = 60_000)]
        sync_timeout_ms: u64,
        #[arg(long)]
        json: bool,
    },
    /// Pause mirroring of topics.
    Pause {
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        topics: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Resume paused topics.
    Resume {
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        topics: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// List mirrors.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Per-partition state, offsets and lag of one or all mirrors.
    Describe {
        name: Option<String>,
        #[arg(long)]
        json: bool,
        /// Only the FAILED partitions (with their reasons).
        #[arg(long)]
        failed: bool,
        /// Refresh until interrupted.
        #[arg(long)]
        watch: bool,
        /// Refresh interval for --watch.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop --watch after this many refreshes (0 = forever).
        #[arg(long, default_value_t = 0)]
        count: u64,
    },
    /// Planned switchover with zero loss (run on the destination): fence the source's
    /// producers (a retriable error), fail every topic over once the destination holds all
    /// the source committed, and make the old source follow the new primary at the same
    /// offsets, refusing if that would truncate anything. Resumable: run it again after any
    /// failure. For an Apache Kafka source: --quiet-ms checks that its producers stopped.
    Switchover {
        name: String,
        /// Every topic of the mirror (the only mode: a switchover moves the whole mirror).
        #[arg(long, required = true)]
        all: bool,
        /// Apache Kafka source: its end offsets must not move for this long before the
        /// failover, and must equal where the destination stopped after it.
        #[arg(long, value_name = "MS")]
        quiet_ms: Option<u64>,
        /// Bounds each wait: the sync before the failover, the partitions stopping, the old
        /// source following.
        #[arg(long, default_value_t = 60_000)]
        sync_timeout_ms: u64,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Failback after an unplanned failover (run on the destination): the old source
    /// follows the destination for every failed-over topic of the mirror, truncating the
    /// tail it wrote after the failover (--dry-run names it).
    Reverse {
        name: String,
        /// Print what each partition of the old source would truncate; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Delete an empty mirror.
    Delete { name: String },
    /// Check, online, that the mirror holds the source's batches byte for byte at the same
    /// offsets (every mirror batch re-checksummed); per partition "equal up to N" or the
    /// first difference. Fails when any partition differs.
    Verify {
        name: String,
        /// Only these topics (comma separated); default: every topic of the mirror.
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// Client properties for verify's own connection to the source (a secured source;
        /// the mirror's stored secrets never leave the broker).
        #[arg(long, value_name = "FILE")]
        source_config: Option<std::path::PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// How the old source follows the destination (`switchover`, `reverse`).
#[derive(clap::Args, Debug, Clone)]
struct FollowArgs {
    /// Name of the mirror created on the old source (default: the same name).
    #[arg(long, value_name = "NAME")]
    reverse_name: Option<String>,
    /// The destination's address as the old source's brokers reach it (default:
    /// --bootstrap).
    #[arg(long, value_name = "HOST:PORT")]
    reverse_source: Option<String>,
    /// Settings of the mirror on the old source (its connection to the destination), from a
    /// Java properties file.
    #[arg(long, value_name = "FILE")]
    reverse_config: Option<std::path::PathBuf>,
    /// Settings of the mirror on the old source, repeatable; override --reverse-config.
    #[arg(long = "reverse-set", value_name = "KEY=VALUE")]
    reverse_set: Vec<String>,
    /// Client properties for the CLI's own connection to the old source.
    #[arg(long, value_name = "FILE")]
    source_config: Option<std::path::PathBuf>,
}

/// Runs `kmirror mirror <args...>`.
pub(crate) fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let cli =
        match MirrorCli::try_parse_from(std::iter::once("kmirror mirror".to_owned()).chain(args)) {
            Ok(c) => c,
            Err(e)
                if matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ) =>
            {
                print!("{e}");
                return Ok(());
            }
            Err(e) => {
                // Keep the one-line contract: first line of clap's message.
                let msg = e.to_string();
                let first = msg
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("invalid arguments")
                    .trim_start_matches("error: ")
                    .to_owned();
                return Err(format!("mirror: {first} (see `kmirror mirror --help`)").into());
            }
        };
    let mut timeout = Duration::from_millis(cli.request_timeout_ms);
    if let Cmd::Remove {
        wait_for_sync: true,
        sync_timeout_ms,
        ..
    }
    | Cmd::Switchover {
        sync_timeout_ms, ..
    } = &cli.cmd
    {
        // The broker answers once in sync (or at the sync timeout).
        timeout = timeout.max(Duration::from_millis(*sync_timeout_ms) + Duration::from_secs(10));
    }
    let security = match &cli.command_config {
        None => ClientSecurity::plaintext(),
        Some(f) => {
            let props = read_properties(f)?;
            ClientSecurity::from_properties(&props)
                .map_err(|e| format!("--command-config {}: {e}", f.display()))?
        }
    };
    let out = &mut std::io::stdout().lock();
    if let Cmd::Verify {
        name,
        topics,
        source_config,
        json,
    } = &cli.cmd
    {
        let source_security = match source_config {
            None => ClientSecurity::plaintext(),
            Some(f) => ClientSecurity::from_properties(&read_properties(f)?)
                .map_err(|e| format!("--source-config {}: {e}", f.display()))?,
        };
        let mut conn = connect(&cli.bootstrap, timeout, &security)?;
        return verify(
            &mut conn,
            out,
            VerifyArgs {
                bootstrap: &cli.bootstrap,
                security: &security,
                source_security: &source_security,
                name,
                topics,
                json: *json,
                timeout,
            },
        );
    }
    let deadline = Instant::now() + Duration::from_millis(cli.retry_timeout_ms);
    let mut backoff = RETRY_BACKOFF_MIN;
    let mut connected_once = false;
    loop {
        let r = connect(&cli.bootstrap, timeout, &security).and_then(|mut conn| {
            connected_once = true;
            match &cli.cmd {
                // Each step is read back from the clusters: a retry resumes.
                Cmd::Switchover {
                    name,
                    quiet_ms,
                    sync_timeout_ms,
                    follow,
                    ..
                } => {
                    let f = follow_args(&cli, name, follow, &security, *sync_timeout_ms, timeout)?;
                    crate::switchover::switchover(&mut conn, out, &f.follow(), *quiet_ms)
                }
                Cmd::Reverse {
                    name,
                    dry_run,
                    follow,
                } => {
                    let f = follow_args(&cli, name, follow, &security, 60_000, timeout)?;
                    crate::switchover::reverse(&mut conn, out, &f.follow(), *dry_run)
                }
                _ => execute(&cli.cmd, &mut conn, out),
            }
        });
        let Err(e) = r else {
            return Ok(());
        };
        // A mirror request retried after its first answer was lost may already have been
        // applied: every mirror admin request can be repeated (a repeated `remove` resumes
        // the failover), except `create`, which then answers that the mirror exists.
        let waiting_on = retriable(e.as_ref()).filter(|_| connected_once);
        match waiting_on {
            Some(what) if Instant::now() + backoff < deadline => {
                eprintln!(
                    "mirror: waiting {} ms for the mirror coordinator: {what}",
                    backoff.as_millis()
                );
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            }
            _ => return Err(e),
        }
    }
}

/// `FollowArgs` resolved (files read, defaults filled).
struct ResolvedFollow<'a> {
    name: &'a str,
    reverse_name: String,
    reverse_source: String,
    reverse_settings: BTreeMap<String, String>,
    security: &'a ClientSecurity,
    source_security: ClientSecurity,
    wait: Duration,
    timeout: Duration,
}

impl ResolvedFollow<'_> {
    fn follow(&self) -> crate::switchover::Follow<'_> {
        crate::switchover::Follow {
            name: self.name,
            reverse_source: &self.reverse_source,
            reverse_name: &self.reverse_name,
            reverse_settings: self.reverse_settings.clone(),
            security: self.security,
            source_security: &self.source_security,
            wait: self.wait,
            timeout: self.timeout,
        }
    }
}

fn follow_args<'a>(
    cli: &'a MirrorCli,
    name: &'a str,
    a: &FollowArgs,
    security: &'a ClientSecurity,
    wait_ms: u64,
    timeout: Duration,
) -> CliResult<ResolvedFollow<'a>> {
    let mut reverse_settings = match &a.reverse_config {
        Some(f) => read_properties(f)?,
        None => BTreeMap::new(),
    };
    reverse_settings.extend(parse_sets(&a.reverse_set)?);
    let source_security = match &a.source_config {
        None => ClientSecurity::plaintext(),
        Some(f) => ClientSecurity::from_properties(&read_properties(f)?)
            .map_err(|e| format!("--source-config {}: {e}", f.display()))?,
    };
    Ok(ResolvedFollow {
        name,
        reverse_name: a.reverse_name.clone().unwrap_or_else(|| name.to_owned()),
        reverse_source: a
            .reverse_source
            .clone()
            .unwrap_or_else(|| cli.bootstrap.clone()),
        reverse_settings,
        security,
        source_security,
        wait: Duration::from_millis(wait_ms),
        timeout,
    })
}

/// Retry backoff bounds (doubling), while the mirror coordinator's seat moves.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(200);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Error codes that mean the mirror coordinator is moving or loading (Kafka's clients
/// retry them the same way for the group coordinator and the controller).
const RETRIABLE_CODES: [i16; 4] = [
    code::COORDINATOR_LOAD_IN_PROGRESS,
    code::COORDINATOR_NOT_AVAILABLE,
    code::NOT_COORDINATOR,
    code::NOT_CONTROLLER,
];

/// What a retry would wait on, if `e` is worth retrying: a retriable code from the broker,
/// or the connection lost mid-request (the node went away; the next bootstrap address or
/// the restarted node may answer).
fn retriable(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(a) = e.downcast_ref::<ApiError>() {
        return RETRIABLE_CODES.contains(&a.code).then(|| a.to_string());
    }
    if let Some(c) = e.downcast_ref::<kmirror_mirror::client::ClientError>() {
        use kmirror_mirror::client::ClientError;
        return match c {
            ClientError::Io { .. } | ClientError::Timeout { .. } => Some(c.to_string()),
            ClientError::Kafka { code, .. } if RETRIABLE_CODES.contains(&code.code()) => {
                Some(c.to_string())
            }
            _ => None,
        };
    }
    None
}

/// A mirror API answered with an error code.
#[derive(Debug)]
struct ApiError {
    api: String,
    code: i16,
    message: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {} ({}): {}",
            self.api,
            code::name(self.code),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

/// Runs one mirror command over `conn`.
fn execute(cmd: &Cmd, conn: &mut BlockingConnection, out: &mut impl Write) -> CliResult<()> {
    match cmd.clone() {
        Cmd::Create {
            name,
            source,
            mirror_config,
            set,
        } => {
            let mut settings = match &mirror_config {
                Some(f) => read_properties(f)?,
                None => BTreeMap::new(),
            };
            settings.extend(parse_sets(&set)?);
            create(conn, out, &name, &source, settings)
        }
        Cmd::Alter {
            name,
            mirror_config,
            set,
            unset,
        } => {
            let mut changes: BTreeMap<String, Option<String>> = match &mirror_config {
                Some(f) => read_properties(f)?
                    .into_iter()
                    .map(|(k, v)| (k, Some(v)))
                    .collect(),
                None => BTreeMap::new(),
            };
            changes.extend(parse_sets(&set)?.into_iter().map(|(k, v)| (k, Some(v))));
            changes.extend(unset.into_iter().map(|k| (k, None)));
            alter(conn, out, &name, changes)
        }
        Cmd::Add {
            name,
            topics,
            topic_regex,
            exclude_regex,
            start,
            dry_run,
            source_config,
            json,
        } => {
            let dry_run = match (dry_run, &source_config) {
                (false, _) => None,
                (true, None) => Some(ClientSecurity::plaintext()),
                (true, Some(f)) => Some(
                    ClientSecurity::from_properties(&read_properties(f)?)
                        .map_err(|e| format!("--source-config {}: {e}", f.display()))?,
                ),
            };
            add(
                conn,
                out,
                &name,
                &topics,
                topic_regex,
                exclude_regex,
                start,
                dry_run,
                json,
            )
        }
        Cmd::Remove {
            name,
            topics,
            topic_regex,
            all,
            wait_for_sync,
            sync_timeout_ms,
            json,
        } => {
            // RemoveTopicsFromMirror's patterns (upstream tag 0): the seat fails over every
            // topic of the mirror they match.
            let patterns: Vec<String> = if all {
                vec![".*".to_owned()]
            } else {
                topic_regex.into_iter().collect()
            };
            let resp = conn.send_mirror(&RemoveTopicsFromMirrorRequest {
                mirror_name: name.clone(),
                topics: topics
                    .iter()
                    .map(|t| TopicName {
                        topic_name: t.clone(),
                        ..Default::default()
                    })
                    .collect(),
                state_validation_offset: -1,
                patterns,
                // The broker checks the sync: it fails the partitions over only once they
                // have mirrored what the source had when the request arrived.
                wait_for_sync_ms: if wait_for_sync {
                    i64::try_from(sync_timeout_ms).unwrap_or(i64::MAX)
                } else {
                    -1
                },
                ..Default::default()
            })?;
            report_topics(out, "RemoveTopicsFromMirror", "failing over", &resp, json)
        }
        Cmd::Pause { name, topics, json } => {
            let resp = conn.send_mirror(&PauseMirrorTopicsRequest(pause_resume(&name, &topics)))?;
            report_topics(out, "PauseMirrorTopics", "paused", &resp, json)
        }
        Cmd::Resume { name, topics, json } => {
            let resp =
                conn.send_mirror(&ResumeMirrorTopicsRequest(pause_resume(&name, &topics)))?;
            report_topics(out, "ResumeMirrorTopics", "resumed", &resp, json)
        }
        Cmd::List { json } => list(conn, out, json),
        Cmd::Describe {
            name,
            json,
            failed,
            watch,
            interval_ms,
            count,
        } => {
            if !watch {
                return describe_once(conn, out, name.as_deref(), json, failed, false);
            }
            let tty = std::io::stdout().is_terminal();
            let mut n = 0u64;
            loop {
                if tty && !json {
                    write!(out, "\x1b[2J\x1b[H")?;
                }
                describe_once(conn, out, name.as_deref(), json, failed, watch)?;
                out.flush()?;
                n += 1;
                if count != 0 && n >= count {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(interval_ms));
            }
        }
        Cmd::Delete { name } => {
            let resp = conn.send_mirror(&DeleteMirrorRequest {
                mirror_name: name.clone(),
                ..Default::default()
            })?;
            check(
                "DeleteMirror",
                resp.error_code,
                resp.error_message.as_deref(),
            )?;
            writeln!(out, "Deleted mirror '{name}'")?;
            Ok(())
        }
        // Answered in `run` (they need their own connections to both clusters).
        Cmd::Verify { .. } | Cmd::Switchover { .. } | Cmd::Reverse { .. } => {
            Err("answered in run".into())
        }
    }
}

/// A Java properties file (mirror settings or client properties).
pub(crate) fn read_properties(path: &std::path::Path) -> CliResult<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(parse_properties(&text))
}

fn connect(
    bootstrap: &str,
    timeout: Duration,
    security: &ClientSecurity,
) -> CliResult<BlockingConnection> {
    // The first reachable address of a bootstrap list.
    let mut last = String::from("no address given");
    let mut found = None;
    for addr in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match BlockingConnection::connect_secured(addr, "kmirror-cli", timeout, security) {
            Ok(c) => {
                found = Some(c);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let conn = found.ok_or_else(|| format!("cannot reach {bootstrap}: {last}"))?;
    if !conn.versions().supports_mirroring() {
        return Err(format!(
            "{bootstrap} does not offer the mirror APIs (mirror.version=0, or not a kmirror broker)"
        )
        .into());
    }
    Ok(conn)
}

pub(crate) fn check(api: &str, error_code: i16, message: Option<&str>) -> CliResult<()> {
    if error_code == code::NONE {
        return Ok(());
    }
    let msg = message.unwrap_or_else(|| code::default_message(error_code));
    Err(Box::new(ApiError {
        api: api.to_owned(),
        code: error_code,
        message: msg.to_owned(),
    }))
}

pub(crate) fn parse_sets(set: &[String]) -> CliResult<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for s in set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--set expects KEY=VALUE, got '{s}'"))?;
        m.insert(k.trim().to_owned(), v.to_owned());
    }
    Ok(m)
}

pub(crate) fn create(
    conn: &mut BlockingConnection,
    out: &mut impl Write,
    name: &str,
    source: &str,
    mut settings: BTreeMap<String, String>,
) -> CliResult<()> {
    settings.insert("bootstrap.servers".to_owned(), source.to_owned());
    let resp = conn.send_mirror(&CreateMirrorRequest {
        mirror_name: name.to_owned(),
        configs: settings
            .into_iter()
            .map(|(k, v)| MirrorConfig {
                name: k,
                value: Some(v),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })?;
    check(
        "CreateMirror",
        resp.error_code,
        resp.error_message.as_deref(),
    )?;
    writeln!(out, "Created mirror '{name}' (source {source})")?;
    Ok(())
}

fn alter(
    conn: &mut BlockingConnection,
    out: &mut impl Write,
    name: &str,
    changes: BTreeMap<String, Option<String>>,
) -> CliResult<()> {
    let keys: Vec<String> = changes.keys().cloned().collect();
    let resp = conn.send_mirror(&CreateMirrorRequest {
        mirror_name: name.to_owned(),
        configs: changes
            .into_iter()
            .map(|(k, v)| MirrorConfig {
                name: k,
                value: v,
                ..Default::default()
            })
            .collect(),
        alter: true,
        ..Default::default()
    })?;
    check(
        "AlterMirror",
        resp.error_code,
        resp.error_message.as_deref(),
    )?;
    // Names only: the values may be secrets.
    writeln!(out, "Altered mirror '{name}': {}", keys.join(", "))?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn add(
    conn: &mut BlockingConnection,
    out: &mut impl Write,
    name: &str,
    topics: &[String],
    topic_regex: Option<String>,
    exclude_regex: Option<String>,
    start: i64,
    dry_run: Option<ClientSecurity>,
    json: bool,
) -> CliResult<()> {
    let resp = conn.send_mirror(&AddTopicsToMirrorRequest {
        include_patterns: topic_regex.into_iter().collect(),
        exclude_patterns: exclude_regex.into_iter().collect(),
        validate_only: dry_run.is_some(),
        ..add_topics_request(name, topics, start)
    })?;
    let Some(source_security) = dry_run else {
        return report_topics(out, "AddTopicsToMirror", "mirroring", &resp, json);
    };
    check(
        "AddTopicsToMirror",
        resp.error_code,
        resp.error_message.as_deref(),
    )?;
    topic_errors("AddTopicsToMirror", &resp)?;
    // The plan is computed over the wire exactly as PREPARING will: our LME, the source's
    // LastMirroredEpochs, OffsetsForLeaderEpoch on both sides.
    let source = source_of(conn, name)?;
    let plan = kmirror_mirror::dry_run_plan(
        conn,
        &source,
        &source_security,
        name,
        topics,
        Duration::from_secs(30),
    )
    .map_err(|e| format!("dry run: {e}"))?;
    print_plan(out, &plan, json)
}

/// A dry run's plan: per partition, the local end, where it would be truncated to and how
/// many records that drops (a table, or JSON rows).
pub(crate) fn print_plan(
    out: &mut impl Write,
    plan: &[kmirror_mirror::DryRunRow],
    json: bool,
) -> CliResult<()> {
    #[derive(Serialize)]
    struct PlanRow<'a> {
        topic: &'a str,
        partition: i32,
        local_end_offset: i64,
        truncate_to: i64,
        records_truncated: i64,
        last_mirrored_epoch: Option<i32>,
    }
    let rows: Vec<PlanRow<'_>> = plan
        .iter()
        .map(|r| PlanRow {
            topic: &r.topic,
            partition: r.partition,
            local_end_offset: r.plan.local_end_offset.get(),
            truncate_to: r.plan.truncate_to.get(),
            records_truncated: r.plan.truncated(),
            last_mirrored_epoch: r.plan.last_mirrored_epoch.map(|e| e.get()),
        })
        .collect();
    if json {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
    } else {
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.topic.to_owned(),
                    r.partition.to_string(),
                    r.local_end_offset.to_string(),
                    r.truncate_to.to_string(),
                    r.records_truncated.to_string(),
                ]
            })
            .collect();
        print_table(
            out,
            &[
                "TOPIC",
                "PARTITION",
                "LOCAL_END",
                "TRUNCATE_TO",
                "TRUNCATED",
            ],
            &table,
        )?;
        writeln!(out, "(dry run: nothing was changed)")?;
    }
    Ok(())
}

/// AddTopicsToMirror of `topics` by name, each new log starting at `start` (a ListOffsets
/// timestamp: -2 earliest, -1 latest, or epoch ms).
pub(crate) fn add_topics_request(
    name: &str,
    topics: &[String],
    start: i64,
) -> AddTopicsToMirrorRequest {
    AddTopicsToMirrorRequest {
        mirror_name: name.to_owned(),
        topics: topics
            .iter()
            .map(|t| StartTopic {
                topic_name: t.clone(),
                num_partitions: -1,
                ..Default::default()
            })
            .collect(),
        state_validation_offset: -1,
        start_timestamp: start,
        ..Default::default()
    }
}

/// The request-level and every per-topic error of a mirror topics answer, as one error.
pub(crate) fn check_topics(api: &str, resp: &MirrorTopicsResponse) -> CliResult<()> {
    check(api, resp.error_code, resp.error_message.as_deref())?;
    topic_errors(api, resp)
}

fn pause_resume(name: &str, topics: &[String]) -> PauseResumeTopics {
    PauseResumeTopics {
        mirror_name: name.to_owned(),
        topics: topics
            .iter()
            .map(|t| TopicRef {
                topic_name: t.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

pub(crate) fn topic_errors(api: &str, resp: &MirrorTopicsResponse) -> CliResult<()> {
    let failed: Vec<String> = resp
        .topics
        .iter()
        .filter(|t| t.error_code != code::NONE)
        .map(|t| {
            format!(
                "{}: {} ({})",
                t.name,
                code::name(t.error_code),
                t.error_message
                    .as_deref()
                    .unwrap_or_else(|| code::default_message(t.error_code))
            )
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{api} failed for {}", failed.join("; ")).into())
    }
}

fn report_topics(
    out: &mut impl Write,
    api: &str,
    verb: &str,
    resp: &MirrorTopicsResponse,
    json: bool,
) -> CliResult<()> {
    check(api, resp.error_code, resp.error_message.as_deref())?;
    if json {
        #[derive(Serialize)]
        struct Row<'a> {
            mirror: &'a str,
            topic: &'a str,
            error: Option<&'static str>,
            message: Option<&'a str>,
            /// RemoveTopicsFromMirror: partition -> the offset its log ends at.
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            stopped_at: BTreeMap<i32, i64>,
        }
        let rows: Vec<Row<'_>> = resp
            .topics
            .iter()
            .map(|t| Row {
                mirror: &resp.mirror_name,
                topic: &t.name,
                error: (t.error_code != 0).then(|| code::name(t.error_code)),
                message: t.error_message.as_deref(),
                stopped_at: t
                    .stopped_at
                    .iter()
                    .map(|p| (p.partition_index, p.offset))
                    .collect(),
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
    } else {
        for t in resp.topics.iter().filter(|t| t.error_code == code::NONE) {
            if t.stopped_at.is_empty() {
                writeln!(out, "{}: {verb}", t.name)?;
            } else {
                let at: Vec<String> = t
                    .stopped_at
                    .iter()
                    .map(|p| format!("{}@{}", p.partition_index, p.offset))
                    .collect();
                writeln!(out, "{}: {verb} (log ends: {})", t.name, at.join(", "))?;
            }
        }
    }
    topic_errors(api, resp)
}

fn list(conn: &mut BlockingConnection, out: &mut impl Write, json: bool) -> CliResult<()> {
    let resp = conn.send_mirror(&ListMirrorsRequest::default())?;
    check(
        "ListMirrors",
        resp.error_code,
        resp.error_message.as_deref(),
    )?;
    if json {
        #[derive(Serialize)]
        struct Row<'a> {
            mirror: &'a str,
            source_bootstrap: &'a str,
            source_cluster_id: &'a str,
            topic_count: i32,
            state: Option<&'a str>,
        }
        let rows: Vec<Row<'_>> = resp
            .mirrors
            .iter()
            .map(|m| Row {
                mirror: &m.mirror_name,
                source_bootstrap: &m.source_bootstrap,
                source_cluster_id: &m.source_cluster_id,
                topic_count: m.topic_count,
                state: m.link_state.as_deref(),
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = resp
        .mirrors
        .iter()
        .map(|m| {
            vec![
                m.mirror_name.clone(),
                m.source_bootstrap.clone(),
                dash_if_empty(&m.source_cluster_id),
                m.topic_count.to_string(),
                m.link_state.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    print_table(
        out,
        &["MIRROR", "SOURCE", "SOURCE_CLUSTER_ID", "TOPICS", "STATE"],
        &rows,
    )
}

/// One partition in `describe --json` (the stable contract: extend, don't rename).
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct DescribeRow {
    pub mirror: String,
    pub topic: String,
    pub partition: i32,
    pub state: String,
    pub source_offset: i64,
    pub destination_offset: i64,
    pub lag: i64,
    pub lag_ms: i64,
    pub last_mirrored_epoch: i32,
    pub failure_reason: Option<String>,
    /// Offsets the source deleted before they were mirrored, and the latest gap (-1: none).
    pub lost_records: i64,
    pub lost_from: i64,
    pub lost_to: i64,
    /// The engine core owning the partition on the destination broker (-1: unknown).
    pub core: i32,
}

pub(crate) fn describe_rows(resp: &DescribeMirrorsResponse) -> Vec<DescribeRow> {
    let mut rows = Vec::new();
    for m in &resp.mirrors {
        for t in &m.topics {
            for p in &t.partitions {
                rows.push(DescribeRow {
                    mirror: m.mirror_name.clone(),
                    topic: t.topic_name.clone(),
                    partition: p.partition_index,
                    state: p.state.clone(),
                    source_offset: p.source_offset,
                    destination_offset: p.destination_offset,
                    lag: p.lag,
                    lag_ms: p.lag_ms,
                    last_mirrored_epoch: p.last_mirror_epoch,
                    failure_reason: p.failure_reason.clone(),
                    lost_records: p.lost_records,
                    lost_from: p.lost_from,
                    lost_to: p.lost_to,
                    core: p.core,
                });
            }
        }
    }
    rows.sort_by(|a, b| {
        (&a.mirror, &a.topic, a.partition).cmp(&(&b.mirror, &b.topic, b.partition))
    });
    rows
}

fn describe_request(name: Option<&str>) -> DescribeMirrorsRequest {
    DescribeMirrorsRequest {
        mirror_names: name.map(str::to_owned).into_iter().collect(),
        ..Default::default()
    }
}

pub(crate) fn fetch_describe(
    conn: &mut BlockingConnection,
    name: Option<&str>,
) -> CliResult<DescribeMirrorsResponse> {
    let resp = conn.send_mirror(&describe_request(name))?;
    check(
        "DescribeMirrors",
        resp.error_code,
        resp.error_message.as_deref(),
    )?;
    for m in &resp.mirrors {
        check(
            &format!("DescribeMirrors({})", m.mirror_name),
            m.error_code,
            None,
        )?;
    }
    Ok(resp)
}

fn describe_once(
    conn: &mut BlockingConnection,
    out: &mut impl Write,
    name: Option<&str>,
    json: bool,
    failed_only: bool,
    watch: bool,
) -> CliResult<()> {
    let resp = fetch_describe(conn, name)?;
    let mut rows = describe_rows(&resp);
    if failed_only {
        rows.retain(|r| r.state == "FAILED");
    }
    if json {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
        return Ok(());
    }
    if watch {
        writeln!(
            out,
            "kmirror mirror describe{} — {}",
            name.map(|n| format!(" {n}")).unwrap_or_default(),
            chrono_like_now()
        )?;
    }
    let table: Vec<Vec<String>> = rows.iter().map(table_row).collect();
    print_table(
        out,
        &[
            "MIRROR",
            "TOPIC",
            "PARTITION",
            "STATE",
            "SOURCE_OFFSET",
            "DEST_OFFSET",
            "LAG",
            "LAG_MS",
            "LME",
            "LOST",
            "CORE",
            "REASON",
        ],
        &table,
    )?;
    for m in &resp.mirrors {
        if let Some(state) = &m.link_state {
            let mut line = format!("Mirror '{}': {state}", m.mirror_name);
            if m.source_unavailable_since_ms >= 0 {
                let for_s = (now_ms() - m.source_unavailable_since_ms).max(0) / 1000;
                line.push_str(&format!(
                    " since {} ms epoch ({for_s} s)",
                    m.source_unavailable_since_ms
                ));
            }
            if !m.failed_partitions.is_empty() {
                line.push_str(&format!(
                    ": FAILED partitions {}",
                    m.failed_partitions.join(", ")
                ));
            }
            writeln!(out, "{line}")?;
        }
        if let Some(e) = &m.sync_error {
            writeln!(
                out,
                "Mirror '{}': metadata sync with the source is failing: {e}",
                m.mirror_name
            )?;
        }
        for c in &m.sync_clashes {
            writeln!(
                out,
                "Mirror '{}': left to its first owner, not synced: {c}",
                m.mirror_name
            )?;
        }
    }
    if !watch {
        // Settings as the broker reports them: secrets arrive as `[hidden]`.
        for m in &resp.mirrors {
            if m.configs.is_empty() {
                continue;
            }
            writeln!(out, "\nSettings of mirror '{}':", m.mirror_name)?;
            for c in &m.configs {
                writeln!(out, "  {}={}", c.name, c.value.as_deref().unwrap_or(""))?;
            }
        }
    }
    if watch {
        let total_lag: i64 = rows.iter().map(|r| r.lag.max(0)).sum();
        let max_ms = rows.iter().map(|r| r.lag_ms).max().unwrap_or(0);
        writeln!(
            out,
            "{} partitions, total lag {total_lag} records, max lag {max_ms} ms",
            rows.len()
        )?;
    }
    Ok(())
}

fn num_or_dash(v: i64) -> String {
    if v < 0 {
        "-".to_owned()
    } else {
        v.to_string()
    }
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

fn table_row(r: &DescribeRow) -> Vec<String> {
    vec![
        r.mirror.clone(),
        r.topic.clone(),
        r.partition.to_string(),
        r.state.clone(),
        num_or_dash(r.source_offset),
        num_or_dash(r.destination_offset),
        num_or_dash(r.lag),
        num_or_dash(r.lag_ms),
        num_or_dash(i64::from(r.last_mirrored_epoch)),
        if r.lost_records > 0 {
            format!("{} [{},{})", r.lost_records, r.lost_from, r.lost_to)
        } else {
            "0".to_owned()
        },
        num_or_dash(i64::from(r.core)),
        r.failure_reason.clone().unwrap_or_else(|| "-".to_owned()),
    ]
}

pub(crate) fn format_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let mut s = String::new();
    let line = |cells: Vec<&str>, s: &mut String| {
        let n = cells.len();
        for (i, c) in cells.into_iter().enumerate() {
            s.push_str(c);
            if i + 1 < n {
                let pad = widths[i] - c.chars().count() + 2;
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        s.push('\n');
    };
    line(headers.to_vec(), &mut s);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut s);
    }
    s
}

pub(crate) fn print_table(
    out: &mut impl Write,
    headers: &[&str],
    rows: &[Vec<String>],
) -> CliResult<()> {
    out.write_all(format_table(headers, rows).as_bytes())?;
    Ok(())
}

/// UTC wall time as HH:MM:SS (no date crate needed for a watch header).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let d = secs % 86_400;
    format!("{:02}:{:02}:{:02} UTC", d / 3600, (d / 60) % 60, d % 60)
}

/// The source bootstrap servers of mirror `name` (ListMirrors).
pub(crate) fn source_of(conn: &mut BlockingConnection, name: &str) -> CliResult<String> {
    mirror_source(conn, name)?.ok_or_else(|| format!("mirror '{name}' does not exist").into())
}

/// The source of mirror `name` on the cluster at `conn` (ListMirrors), if it exists.
pub(crate) fn mirror_source(
    conn: &mut BlockingConnection,
    name: &str,
) -> CliResult<Option<String>> {
    let list = conn.send_mirror(&ListMirrorsRequest::default())?;
    check(
        "ListMirrors",
        list.error_code,
        list.error_message.as_deref(),
    )?;
    Ok(list
        .mirrors
        .into_iter()
        .find(|m| m.mirror_name == name)
        .map(|m| m.source_bootstrap))
}

struct VerifyArgs<'a> {
    bootstrap: &'a str,
    security: &'a ClientSecurity,
    source_security: &'a ClientSecurity,
    name: &'a str,
    topics: &'a [String],
    json: bool,
    timeout: Duration,
}

/// `verify`: the mirror's partitions (DescribeMirrors) checked against its source.
fn verify(conn: &mut BlockingConnection, out: &mut impl Write, a: VerifyArgs<'_>) -> CliResult<()> {
    use kmirror_mirror::verify::{verify_partitions, Verdict};
    let source = source_of(conn, a.name)?;
    let parts: Vec<kmirror_types::TopicPartition> =
        describe_rows(&fetch_describe(conn, Some(a.name))?)
            .into_iter()
            .filter(|r| a.topics.is_empty() || a.topics.contains(&r.topic))
            .map(|r| kmirror_types::TopicPartition::new(r.topic, r.partition))
            .collect();
    if parts.is_empty() {
        return Err(format!("mirror '{}' has no partitions to verify", a.name).into());
    }
    let rows = verify_partitions(
        a.bootstrap,
        a.security,
        &source,
        a.source_security,
        &parts,
        a.timeout,
    )
    .map_err(|e| format!("verify: {e}"))?;
    let differing = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Differs { .. }))
        .count();
    if a.json {
        #[derive(Serialize)]
        struct Row<'a> {
            topic: &'a str,
            partition: i32,
            equal: bool,
            from: Option<i64>,
            upto: Option<i64>,
            batches: Option<u64>,
            first_difference: Option<i64>,
            what: Option<&'a str>,
        }
        let json: Vec<Row<'_>> = rows
            .iter()
            .map(|r| match &r.verdict {
                Verdict::Equal {
                    from,
                    upto,
                    batches,
                } => Row {
                    topic: &r.tp.topic,
                    partition: r.tp.partition,
                    equal: true,
                    from: Some(*from),
                    upto: Some(*upto),
                    batches: Some(*batches),
                    first_difference: None,
                    what: None,
                },
                Verdict::Differs { offset, what } => Row {
                    topic: &r.tp.topic,
                    partition: r.tp.partition,
                    equal: false,
                    from: None,
                    upto: None,
                    batches: None,
                    first_difference: Some(*offset),
                    what: Some(what),
                },
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string(&json)?)?;
    } else {
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let verdict = match &r.verdict {
                    Verdict::Equal {
                        from,
                        upto,
                        batches,
                    } => {
                        format!("equal from {from} up to offset {upto} ({batches} batches)")
                    }
                    Verdict::Differs { offset, what } => {
                        format!("DIFFERS at offset {offset}: {what}")
                    }
                };
                vec![r.tp.topic.clone(), r.tp.partition.to_string(), verdict]
            })
            .collect();
        print_table(out, &["TOPIC", "PARTITION", "RESULT"], &table)?;
    }
    if differing > 0 {
        return Err(format!(
            "verify: {differing} of {} partitions differ from the source",
            rows.len()
        )
        .into());
    }
    Ok(())
}

/// `add --start`: `earliest` (-2), `latest` (-1) or epoch milliseconds, as ListOffsets
/// timestamps.
fn parse_start(v: &str) -> Result<i64, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "earliest" => Ok(-2),
        "latest" => Ok(-1),
        n => n
            .parse::<i64>()
            .ok()
            .filter(|ms| *ms >= 0)
            .ok_or_else(|| format!("'{v}' is not earliest, latest or a time in epoch ms")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_mirror::api::{DescribedMirror, DescribedTopic, PartitionDetail};

    #[test]
    fn seed_and_upstream_command_names_both_parse() {
        for args in [
            vec!["add", "dr", "--topics", "a,b"],
            vec!["start", "dr", "--topic-regex", "pay.*"],
            vec!["remove", "dr", "--topics", "a"],
            vec!["stop", "dr", "--topics", "a", "--wait-for-sync"],
            vec!["remove", "dr", "--all"],
            vec!["add", "dr", "--topics", "a", "--start", "latest"],
            vec![
                "add",
                "dr",
                "--topic-regex",
                "a.*",
                "--start",
                "1700000000000",
            ],
            vec!["remove", "dr", "--topic-regex", "pay.*", "--wait-for-sync"],
            vec!["describe", "--json"],
            vec!["--bootstrap", "h:1", "list"],
            vec!["create", "dr", "--source", "h:2", "--set", "a=b"],
        ] {
            let argv = std::iter::once("kmirror mirror").chain(args.iter().copied());
            MirrorCli::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
        let c = MirrorCli::try_parse_from(["x", "add", "dr", "--topics", "a,b"]).unwrap();
        match c.cmd {
            Cmd::Add { topics, .. } => assert_eq!(topics, vec!["a", "b"]),
            other => panic!("{other:?}"),
        }
        assert!(
            MirrorCli::try_parse_from(["x", "add", "dr"]).is_err(),
            "topics or regex required"
        );
        assert!(
            MirrorCli::try_parse_from(["x", "remove", "dr"]).is_err(),
            "topics, regex or --all required"
        );
        assert!(
            MirrorCli::try_parse_from(["x", "add", "dr", "--topics", "a", "--start", "soon"])
                .is_err()
        );
        assert_eq!(parse_start("EARLIEST"), Ok(-2));
        assert_eq!(parse_start("latest"), Ok(-1));
        assert_eq!(parse_start("5"), Ok(5));
    }

    #[test]
    fn only_a_moving_coordinator_or_a_lost_connection_is_retried() {
        let api = |code| -> Box<dyn std::error::Error> {
            Box::new(ApiError {
                api: "RemoveTopicsFromMirror".into(),
                code,
                message: "m".into(),
            })
        };
        for c in [14, 15, 16, 41] {
            let why = retriable(api(c).as_ref()).unwrap_or_default();
            assert!(why.contains(&format!("({c})")), "{c}: {why}");
        }
        for c in [3, 31, 136, 137] {
            assert_eq!(retriable(api(c).as_ref()), None, "{c}");
        }
        let lost: Box<dyn std::error::Error> = Box::new(kmirror_mirror::client::ClientError::Io {
            addr: "n2:9092".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        });
        assert!(retriable(lost.as_ref()).is_some());
        let plain: Box<dyn std::error::Error> = "cannot reach n1:9092".into();
        assert_eq!(retriable(plain.as_ref()), None);
    }

    #[test]
    fn bad_arguments_give_a_one_line_error() {
        let e = run(vec!["frobnicate".into()]).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.starts_with("mirror: "));
    }

    #[test]
    fn unreachable_broker_gives_a_one_line_error() {
        // Port 1 on loopback is closed.
        let e = run(vec![
            "--bootstrap".into(),
            "127.0.0.1:1".into(),
            "--request-timeout-ms".into(),
            "500".into(),
            "list".into(),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot reach 127.0.0.1:1"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn describe_json_has_the_contract_fields_per_partition() {
        let resp = DescribeMirrorsResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "dr".into(),
                topics: vec![DescribedTopic {
                    topic_name: "orders".into(),
                    partitions: vec![
                        PartitionDetail {
                            partition_index: 1,
                            source_offset: 10,
                            destination_offset: 4,
                            lag: 6,
                            lag_ms: 1500,
                            state: "MIRRORING".into(),
                            last_mirror_epoch: -1,
                            core: 1,
                            ..Default::default()
                        },
                        PartitionDetail {
                            partition_index: 0,
                            state: "FAILED".into(),
                            failure_reason: Some("CRC".into()),
                            lost_records: 40,
                            lost_from: 10,
                            lost_to: 50,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let rows = describe_rows(&resp);
        assert_eq!(rows[0].partition, 0, "sorted by partition");
        let v: serde_json::Value = serde_json::to_value(&rows).unwrap();
        let obj = v[1].as_object().unwrap();
        for k in [
            "mirror",
            "topic",
            "partition",
            "state",
            "source_offset",
            "destination_offset",
            "lag",
            "lag_ms",
        ] {
            assert!(obj.contains_key(k), "missing {k}");
        }
        assert_eq!(obj["lag"], 6);
        assert_eq!(obj["lag_ms"], 1500);
        assert_eq!(v[0]["failure_reason"], "CRC");
        assert_eq!(
            (&v[0]["lost_records"], &v[0]["lost_from"], &v[0]["lost_to"]),
            (&40.into(), &10.into(), &50.into())
        );
        assert_eq!(v[1]["lost_records"], 0, "no gap by default");
        assert_eq!(table_row(&rows[0])[9], "40 [10,50)");
        assert_eq!((&v[1]["core"], &v[0]["core"]), (&1.into(), &(-1).into()));
        assert_eq!(table_row(&rows[1])[10], "1");
    }

    #[test]
    fn table_columns_line_up() {
        let t = format_table(
            &["A", "LONGER"],
            &[
                vec!["xxxx".into(), "1".into()],
                vec!["y".into(), "22".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        let col = lines[0].find("LONGER").unwrap();
        assert_eq!(lines[1].find('1').unwrap(), col);
        assert_eq!(lines[2].find("22").unwrap(), col);
    }

    #[test]
    fn set_flags_parse_key_value_pairs() {
        let m = parse_sets(&["a=b".into(), "sasl.jaas.config=x=y".into()]).unwrap();
        assert_eq!(m["a"], "b");
        assert_eq!(m["sasl.jaas.config"], "x=y");
        assert!(parse_sets(&["novalue".into()]).is_err());
    }
}
