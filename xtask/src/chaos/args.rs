//! `cargo xtask chaos` arguments.

/// A coordinator the harness runs nodes against.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mariadb,
    Valkey,
    Redis8,
    Etcd,
    ZooKeeper,
}

impl Backend {
    pub const ALL: [Backend; 7] = [
        Backend::Sqlite,
        Backend::Valkey,
        Backend::Redis8,
        Backend::Postgres,
        Backend::Mariadb,
        Backend::Etcd,
        Backend::ZooKeeper,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mariadb => "mariadb",
            Backend::Valkey => "valkey9",
            Backend::Redis8 => "redis8",
            Backend::Etcd => "etcd",
            Backend::ZooKeeper => "zookeeper",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == s)
    }
}

pub struct Options {
    pub seed: u64,
    pub long: bool,
    pub nodes: usize,
    pub secs: u64,
    pub backends: Vec<Backend>,
    pub guard: bool,
    /// Extra lease-sql URL options for the nodes (`amnesia_guard=off` to see what the guard
    /// prevents).
    pub sql_options: Option<String>,
    /// Clocks within the margin of each other (the condition the guarantee still needs on
    /// stores that can lose writes; see docs/safety.md, "Remaining conditions").
    pub within_margin: bool,
    /// The nodes' amnesia guard off, their stores' initialization markers with it (Valkey/Redis
    /// and SQL; etcd has no such switch), to see what the guard prevents.
    pub without_amnesia_guard: bool,
    /// The nodes take floors as clock ms, as before floors knew the epoch (the `epoch` fault's
    /// protection off).
    pub floors_in_clock_ms: bool,
    /// A rebuilt manager resumes its lease without the cache's record of what the old
    /// factories issued (the `rebuild` fault's protection off).
    pub without_issued_record: bool,
    /// ZooKeeper nodes hold off for their session alone after a loss (`max_clock_offset_s=0`),
    /// without the run's clock bound (see `coordinator::zookeeper_clock_offset_s`), to see what
    /// it prevents.
    pub zookeeper_session_hold_off: bool,
    /// IDs the nodes share beyond one each (the rest are held by a foreign holder); 0 leaves
    /// every ID to one node, so a node restarted gracefully takes its own ID back at once.
    pub spare_ids: usize,
    /// Draw each backend's run as a timeline into this folder (`chaos-<backend>.svg`).
    pub report: Option<std::path::PathBuf>,
}

/// `text`, the value of `flag`, as a number.
fn number<T: std::str::FromStr<Err = std::num::ParseIntError>>(
    flag: &str,
    text: &str,
) -> Result<T, String> {
    text.parse().map_err(|e| format!("{flag}: {e}"))
}

pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        seed: 1,
        long: false,
        nodes: 8,
        secs: 0,
        backends: Vec::new(),
        guard: true,
        sql_options: None,
        within_margin: false,
        without_amnesia_guard: false,
        floors_in_clock_ms: false,
        without_issued_record: false,
        zookeeper_session_hold_off: false,
        spare_ids: super::actions::SPARE_IDS,
        report: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--long" => o.long = true,
            "--no-guard" => o.guard = false,
            "--within-margin" => o.within_margin = true,
            "--without-amnesia-guard" => o.without_amnesia_guard = true,
            "--floors-in-clock-ms" => o.floors_in_clock_ms = true,
            "--without-issued-record" => o.without_issued_record = true,
            "--zookeeper-session-hold-off" => o.zookeeper_session_hold_off = true,
            "--seed" => o.seed = number(arg, &value(arg)?)?,
            "--nodes" => o.nodes = number(arg, &value(arg)?)?,
            "--secs" => o.secs = number(arg, &value(arg)?)?,
            "--sql-options" => o.sql_options = Some(value("--sql-options")?),
            "--spare-ids" => o.spare_ids = number(arg, &value(arg)?)?,
            "--report" => {
                let dir = std::path::PathBuf::from(value(arg)?);
                // Against the folder the command was run from, not the node processes'.
                let dir = std::path::absolute(&dir)
                    .map_err(|e| format!("--report {}: {e}", dir.display()))?;
                o.report = Some(dir);
            }
            "--backend" => {
                for name in value("--backend")?.split(',') {
                    o.backends.push(Backend::parse(name).ok_or_else(|| {
                        format!(
                            "unknown backend {name}: use sqlite, valkey9, redis8, postgres, mariadb, etcd, zookeeper"
                        )
                    })?);
                }
            }
            other => {
                return Err(format!(
                    "unknown chaos argument {other}: use --long, --seed N, --backend NAME[,NAME], --nodes N, --secs S, --no-guard, --within-margin, --without-amnesia-guard, --floors-in-clock-ms, --without-issued-record, --zookeeper-session-hold-off, --spare-ids N, --sql-options K=V[&K=V], --report DIR"
                ));
            }
        }
    }
    if o.nodes < 2 {
        return Err("--nodes must be at least 2".into());
    }
    if o.backends.is_empty() {
        o.backends = Backend::ALL.to_vec();
    }
    if o.secs == 0 {
        o.secs = if o.long { 150 } else { 30 };
    }
    if o.secs < 20 {
        return Err(
            "--secs must be at least 20 (5 s of leases first, 8 s of recovery last)".into(),
        );
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn defaults_and_choices() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.seed, o.nodes, o.secs, o.long), (1, 8, 30, false));
        assert_eq!(o.backends, Backend::ALL);
        assert!(o.backends.contains(&Backend::Etcd));
        let o = parse(&args("--long --seed 7 --backend postgres,sqlite --nodes 4")).unwrap();
        assert_eq!((o.seed, o.nodes, o.secs, o.long), (7, 4, 150, true));
        assert_eq!(o.backends, [Backend::Postgres, Backend::Sqlite]);
        assert_eq!(
            parse(&args("--backend etcd")).unwrap().backends,
            [Backend::Etcd]
        );
        assert_eq!(
            parse(&args("--backend zookeeper,etcd")).unwrap().backends,
            [Backend::ZooKeeper, Backend::Etcd]
        );
        assert!(parse(&args("--backend oracle")).is_err());
        assert_eq!(o.spare_ids, super::super::actions::SPARE_IDS);
        assert_eq!(parse(&args("--spare-ids 0")).unwrap().spare_ids, 0);
        assert!(parse(&args("--spare-ids many")).is_err());
        assert!(o.report.is_none());
        let drawn = parse(&args("--report pictures")).unwrap().report.unwrap();
        assert!(drawn.is_absolute() && drawn.ends_with("pictures"));
        assert!(parse(&args("--report")).is_err());
        assert!(parse(&args("--nodes 1")).is_err());
        assert!(parse(&args("--seed")).is_err());
        assert!(!o.without_amnesia_guard);
        assert!(!o.floors_in_clock_ms && !o.without_issued_record);
        let off = parse(&args("--floors-in-clock-ms --without-issued-record")).unwrap();
        assert!(off.floors_in_clock_ms && off.without_issued_record);
        assert!(!o.zookeeper_session_hold_off);
        assert!(
            parse(&args("--zookeeper-session-hold-off"))
                .unwrap()
                .zookeeper_session_hold_off
        );
        assert!(
            parse(&args("--without-amnesia-guard"))
                .unwrap()
                .without_amnesia_guard
        );
    }
}
