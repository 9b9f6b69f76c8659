//! The seeded fault schedule and every node's clocks.

use super::rng::Rng;

/// Lease timing every node uses (ms): short, so faults outlast leases within seconds.
pub const LEASE_MS: u64 = 5000;
/// The nodes' safety margin (ms); clock offsets and steps are multiples of it.
pub const MARGIN_MS: u64 = 750;
pub const NODE_TIMING: [(&str, u64); 5] = [
    ("--lease-ms", LEASE_MS),
    ("--renew-ms", 1000),
    ("--min-ttl-ms", 2000),
    ("--margin-ms", MARGIN_MS),
    ("--call-timeout-ms", 1500),
];

/// Clock offsets in margins: ahead and behind by a little, by more than the margin twice
/// over, and by far more than a lease.
const OFFSETS: [i64; 7] = [0, 2, -2, 5, -5, 20, -20];
/// The long run adds an hour's worth of skew at production timing, scaled to the chaos
/// timing: an hour is 360 default margins (10 s), here 360 x 750 ms = 270 s.
const HOUR_EQUIVALENT: i64 = 360;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The node's proxy stalls (true) or heals (false).
    Partition(usize, bool),
    /// The node's proxy resets every connection (true) until healed (false).
    Reset(usize, bool),
    /// The node's proxy delays every chunk by this many ms (0: heal).
    Latency(usize, u64),
    Freeze(usize),
    Thaw(usize),
    Kill(usize),
    Restart(usize),
    /// SIGUSR1: the node steps its clock back.
    ClockStep(usize),
    Steal,
    /// The node is restarted gracefully with its factories on an epoch this many ms from the
    /// default one (kept by its later processes).
    Epoch(usize, i64),
    /// SIGUSR2: the node drops its lease manager without releasing the lease and resumes it
    /// from the cache with a new manager and new factories.
    Rebuild(usize),
    /// The store loses the run's lease data while the server stays up (true: the wider form,
    /// `FLUSHALL` or `TRUNCATE`); nothing initializes it again.
    Wipe(bool),
    /// Every server of the coordinator is killed (`kill -9`).
    CoordinatorDown,
    /// Every server of the coordinator that is down starts again.
    CoordinatorUp,
    /// One ZooKeeper member is killed (`kill -9`); `CoordinatorUp` restarts it.
    MemberDown(usize),
    /// The ZooKeeper member that leads at the time is killed (`kill -9`); `CoordinatorUp`
    /// restarts it.
    LeaderDown,
    /// Every node's proxy to one ZooKeeper member stalls (true) or passes again (false).
    MemberCut(usize, bool),
    /// Every node's proxy to one ZooKeeper member delays every chunk by this many ms (0: heal).
    MemberLatency(usize, u64),
    /// The replica stops receiving WAL.
    FailoverLag,
    /// The primary is killed, the lagging replica promoted, the nodes repointed.
    FailoverPromote,
    Rolling,
    Herd,
}

impl Action {
    /// Whether the action begins a fault (rather than healing or ending one).
    pub fn begins_fault(self) -> bool {
        !matches!(
            self,
            Action::Partition(_, false)
                | Action::Reset(_, false)
                | Action::Latency(_, 0)
                | Action::MemberCut(_, false)
                | Action::MemberLatency(_, 0)
                | Action::Thaw(_)
                | Action::Restart(_)
                | Action::CoordinatorUp
                | Action::FailoverPromote
        )
    }
}

/// What a backend offers for faults.
#[derive(Clone, Copy, Debug)]
pub struct Features {
    /// Nodes reach the coordinator through proxies.
    pub proxy: bool,
    /// The coordinator is a server of the run's own that can be killed and restarted.
    pub server: bool,
    /// A streaming replica to fail over to.
    pub replica: bool,
    /// An ensemble of members (ZooKeeper), each behind a proxy per node: a member or the
    /// leader can be killed alone, and every node cut off from one member.
    pub ensemble: bool,
}

/// The largest offset any node's clock may take from the machine's (the stores' clock) in a run
/// of `clocks` and `actions`: its largest planned offset and every clock step it is planned to
/// take at its largest step, and a second for the calls' round trips, in whole seconds.
pub fn clock_bound_ms(clocks: &[NodeClocks], actions: &[(u64, Action)]) -> u64 {
    let worst = clocks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let offset = c
                .offsets_ms
                .iter()
                .map(|o| o.unsigned_abs())
                .max()
                .unwrap_or(0);
            let step = c.steps_ms.iter().copied().max().unwrap_or(0);
            let steps = actions
                .iter()
                .filter(|(_, a)| *a == Action::ClockStep(i))
                .count();
            offset + step * u64::try_from(steps).unwrap_or(u64::MAX)
        })
        .max()
        .unwrap_or(0);
    (worst + 1000).div_ceil(1000) * 1000
}

/// A node's clock offset and step for each process incarnation (1-based).
#[derive(Clone, Debug, Default)]
pub struct NodeClocks {
    pub offsets_ms: Vec<i64>,
    pub steps_ms: Vec<u64>,
}

impl NodeClocks {
    /// (offset, step) for incarnation `k` (the last ones repeat).
    pub fn get(&self, k: u32) -> (i64, u64) {
        let i = usize::try_from(k.max(1) - 1).unwrap_or(usize::MAX);
        fn pick<T: Copy + Default>(v: &[T], i: usize) -> T {
            v.get(i).or(v.last()).copied().unwrap_or_default()
        }
        (pick(&self.offsets_ms, i), pick(&self.steps_ms, i))
    }
}

pub struct Plan {
    /// (ms after start, action), sorted.
    pub actions: Vec<(u64, Action)>,
    /// Per node.
    pub clocks: Vec<NodeClocks>,
}

/// The members of a ZooKeeper ensemble (see `servers::ZooKeeperEnsemble`).
const MEMBERS: usize = 3;

/// How many process incarnations a node's clock plan covers (later ones repeat the last).
const INCARNATIONS: usize = 24;

fn clocks(rng: &mut Rng, nodes: usize, long: bool) -> Vec<NodeClocks> {
    let mut choices: Vec<i64> = OFFSETS.to_vec();
    if long {
        choices.extend([HOUR_EQUIVALENT, -HOUR_EQUIVALENT]);
    }
    // The first start: every offset once (node order seeded); the long run gives one node the
    // hour's worth of skew, either way.
    let mut first: Vec<i64> = OFFSETS.to_vec();
    if long {
        first.push(if rng.next().is_multiple_of(2) {
            HOUR_EQUIVALENT
        } else {
            -HOUR_EQUIVALENT
        });
    }
    let mut order: Vec<usize> = (0..nodes).collect();
    rng.shuffle(&mut order);
    let mut out = vec![NodeClocks::default(); nodes];
    for (k, &node) in order.iter().enumerate() {
        let mut offset = first[k % first.len()];
        let clocks = &mut out[node];
        for _ in 0..INCARNATIONS {
            clocks
                .offsets_ms
                .push(offset * i64::try_from(MARGIN_MS).unwrap_or(0));
            clocks.steps_ms.push(rng.range(2, 20) * MARGIN_MS);
            // Restarts come back with a different offset.
            let previous = offset;
            while offset == previous {
                offset = rng.pick(&choices);
            }
        }
    }
    out
}

/// The fault classes a backend gets (`wipe` on every backend, always the last fault;
/// `rebuild` follows each clock step, on the stepped node).
pub fn classes(features: Features) -> Vec<&'static str> {
    let mut classes = vec![
        "freeze",
        "kill9",
        "steal",
        "rolling",
        "clock_step",
        "epoch",
        "rebuild",
        "wipe",
    ];
    if features.proxy {
        classes.extend(["partition", "reset", "latency"]);
    }
    if features.server {
        classes.push("coordinator");
    }
    if features.replica {
        classes.push("failover");
    }
    if features.ensemble {
        classes.extend(["member", "leader", "member_cut", "member_latency"]);
    }
    classes
}

/// The seeded schedule over `secs` seconds: the short run injects every class once in a
/// seeded order, each on a different node; the long run one every ~4 s, every class at
/// least once (failover once, rolling at most twice), and a herd restart. Either way the
/// wipe comes once, last: after every other fault began and every server fault ended, at the
/// end of the planned time (its amnesia hold-off outlasts the rest of a short run; the long
/// run is extended past it, see `run.rs`).
pub fn plan(rng: &mut Rng, nodes: usize, secs: u64, long: bool, features: Features) -> Plan {
    let clocks = clocks(rng, nodes, long);
    let end_ms = secs * 1000;
    let classes: Vec<&str> = classes(features)
        .into_iter()
        .filter(|c| !matches!(*c, "wipe" | "rebuild"))
        .collect();
    let mut picks: Vec<&str> = classes.clone();
    rng.shuffle(&mut picks);
    if long {
        let slots = usize::try_from((end_ms - 15_000) / 4_000).unwrap_or(0);
        while picks.len() < slots {
            let c = rng.pick(&classes);
            let limit = match c {
                "failover" => 1,
                "rolling" => 2,
                _ => usize::MAX,
            };
            if picks.iter().filter(|p| **p == c).count() >= limit {
                continue;
            }
            picks.push(c);
        }
        picks.push("herd");
    }
    // Leave 5 s at the start for the first leases and ~8 s at the end for recovery.
    let first = 5_000;
    let last = end_ms.saturating_sub(8_000).max(first + 1);
    let step = (last - first) / picks.len() as u64;
    // Nodes in seeded order, one per fault in turn: faults on one node's proxy never overlap
    // (a heal would end the other fault early).
    let mut order: Vec<usize> = (0..nodes).collect();
    rng.shuffle(&mut order);
    // Server faults (restart, failover, a member's or the leader's kill) never overlap each
    // other.
    let mut server_free_at = 0;
    // Nor do the faults of the proxies to one ZooKeeper member (a heal would end the other
    // early): one at a time, on any member.
    let mut member_proxies_free_at = 0;
    let mut out = Vec::new();
    for (k, class) in picks.iter().enumerate() {
        let t = first + step * k as u64 + rng.range(0, step / 3);
        let node = order[k % nodes];
        let cut = LEASE_MS + rng.range(500, 2000);
        match *class {
            "partition" => {
                out.push((t, Action::Partition(node, true)));
                out.push((t + cut, Action::Partition(node, false)));
            }
            "reset" => {
                // Sometimes shorter than a lease (renewals retry on a new connection),
                // sometimes longer (lost).
                let d = rng.range(1000, LEASE_MS + 2000);
                out.push((t, Action::Reset(node, true)));
                out.push((t + d, Action::Reset(node, false)));
            }
            "latency" => {
                out.push((t, Action::Latency(node, rng.range(200, 1200))));
                out.push((t + rng.range(3000, 5000), Action::Latency(node, 0)));
            }
            "freeze" => {
                out.push((t, Action::Freeze(node)));
                out.push((t + cut, Action::Thaw(node)));
            }
            "kill9" => {
                out.push((t, Action::Kill(node)));
                out.push((t + rng.range(300, 1500), Action::Restart(node)));
            }
            "clock_step" => {
                out.push((t, Action::ClockStep(node)));
                // The rebuild: while the stepped clock (2-20 margins back) is still behind what
                // the node's factories issued before the step, so that new factories started
                // above the lease's floor alone would repeat their values.
                out.push((t + rng.range(300, 1_000), Action::Rebuild(node)));
            }
            "epoch" => {
                // Up to a lease earlier or later than the default epoch, at least 2 s.
                let shift = i64::try_from(rng.range(2_000, LEASE_MS)).unwrap_or(0);
                let sign = if rng.next().is_multiple_of(2) { 1 } else { -1 };
                out.push((t, Action::Epoch(node, sign * shift)));
            }
            "steal" => out.push((t, Action::Steal)),
            "coordinator" => {
                let t = t.max(server_free_at);
                // Sometimes shorter than a lease (renewals retry), sometimes longer (lost).
                let up = t + rng.range(1000, LEASE_MS + 2000);
                out.push((t, Action::CoordinatorDown));
                out.push((up, Action::CoordinatorUp));
                server_free_at = up + 2_000;
            }
            "failover" => {
                let t = t.max(server_free_at);
                // The replica misses more than a lease's worth of writes: every lease granted
                // or renewed meanwhile is unknown to it.
                let promote = t + LEASE_MS + rng.range(500, 2500);
                out.push((t, Action::FailoverLag));
                out.push((promote, Action::FailoverPromote));
                server_free_at = promote + LEASE_MS + 2_000;
            }
            "member" | "leader" => {
                let t = t.max(server_free_at);
                // Sometimes shorter than a lease (sessions move to the other members, or wait
                // out the election), sometimes longer.
                let up = t + rng.range(1000, LEASE_MS + 2000);
                let down = if *class == "leader" {
                    Action::LeaderDown
                } else {
                    Action::MemberDown(rng.index(MEMBERS))
                };
                out.push((t, down));
                out.push((up, Action::CoordinatorUp));
                server_free_at = up + 2_000;
            }
            "member_cut" | "member_latency" => {
                let t = t.max(member_proxies_free_at);
                let member = rng.index(MEMBERS);
                let (on, off, heal) = if *class == "member_cut" {
                    // Its clients' connections stall: they give up on it and move on.
                    let d = rng.range(1000, LEASE_MS + 2000);
                    (
                        Action::MemberCut(member, true),
                        d,
                        Action::MemberCut(member, false),
                    )
                } else {
                    let ms = rng.range(200, 1200);
                    let d = rng.range(3000, 5000);
                    (
                        Action::MemberLatency(member, ms),
                        d,
                        Action::MemberLatency(member, 0),
                    )
                };
                out.push((t, on));
                out.push((t + off, heal));
                member_proxies_free_at = t + off + 500;
            }
            "rolling" => out.push((t, Action::Rolling)),
            _ => out.push((t, Action::Herd)),
        }
    }
    // The wipe: at the end of the planned time, after every other fault's start and every
    // server fault's end; the wider form (FLUSHALL, TRUNCATE) on half the seeds.
    let begun = out
        .iter()
        .filter(|(_, a)| a.begins_fault())
        .map(|(t, _)| *t + 500)
        .max()
        .unwrap_or(0);
    let wide = rng.next().is_multiple_of(2);
    let t = (last + rng.range(0, step / 3))
        .max(begun)
        .max(server_free_at);
    out.push((t, Action::Wipe(wide)));
    out.sort_by_key(|(t, _)| *t);
    Plan {
        actions: out,
        clocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_bound_covers_every_offset_and_planned_step() {
        let clocks = vec![
            NodeClocks {
                offsets_ms: vec![-15_000, 3_000],
                steps_ms: vec![2_000, 5_000],
            },
            NodeClocks {
                offsets_ms: vec![20_000],
                steps_ms: vec![1_000],
            },
        ];
        let actions = [
            (10, Action::ClockStep(0)),
            (20, Action::ClockStep(0)),
            (30, Action::Freeze(1)),
        ];
        // Node 0: 15 s and two steps of up to 5 s; node 1: 20 s and no step; and a second.
        assert_eq!(clock_bound_ms(&clocks, &actions), 26_000);
        // Rounded up to whole seconds (the SQL URL option takes seconds).
        let odd = vec![NodeClocks {
            offsets_ms: vec![187],
            steps_ms: vec![187],
        }];
        assert_eq!(clock_bound_ms(&odd, &[(1, Action::ClockStep(0))]), 2_000);
    }

    const ALL: Features = Features {
        proxy: true,
        server: true,
        replica: true,
        ensemble: false,
    };

    /// ZooKeeper: an ensemble behind proxies, without a replica.
    const ENSEMBLE: Features = Features {
        proxy: true,
        server: true,
        replica: false,
        ensemble: true,
    };

    #[test]
    fn the_short_plan_has_every_class_once_and_is_seeded() {
        let a = plan(&mut Rng::new(1), 8, 30, false, ALL);
        let b = plan(&mut Rng::new(1), 8, 30, false, ALL);
        assert_eq!(a.actions, b.actions);
        let count = |f: fn(&Action) -> bool| a.actions.iter().filter(|(_, x)| f(x)).count();
        assert_eq!(count(|a| matches!(a, Action::Partition(_, true))), 1);
        assert_eq!(count(|a| matches!(a, Action::Reset(_, true))), 1);
        assert_eq!(count(|a| matches!(a, Action::ClockStep(_))), 1);
        assert_eq!(count(|a| matches!(a, Action::FailoverPromote)), 1);
        assert_eq!(count(|a| matches!(a, Action::CoordinatorDown)), 1);
        assert_eq!(count(|a| matches!(a, Action::Wipe(_))), 1);
        assert_eq!(count(|a| matches!(a, Action::Epoch(..))), 1);
        assert_eq!(count(|a| matches!(a, Action::Rebuild(_))), 1);
        assert!(a.actions.windows(2).all(|w| w[0].0 <= w[1].0));
        let c = plan(&mut Rng::new(2), 8, 30, false, ALL);
        assert_ne!(a.actions, c.actions);
    }

    /// The feature sets of the backends: SQLite (a file), Valkey/Redis, MariaDB and etcd (a
    /// server behind proxies), PostgreSQL (and its replica), ZooKeeper (an ensemble).
    const BACKENDS: [Features; 4] = [
        Features {
            proxy: false,
            server: false,
            replica: false,
            ensemble: false,
        },
        Features {
            proxy: true,
            server: true,
            replica: false,
            ensemble: false,
        },
        ALL,
        ENSEMBLE,
    ];

    /// Calls `check` with every backend's plans of both lengths over 100 seeds, each checked to
    /// be the same again from its seed.
    fn every_plan(mut check: impl FnMut(Features, u64, bool, u64, &Plan)) {
        for features in BACKENDS {
            for class in ["wipe", "epoch", "rebuild"] {
                assert!(classes(features).contains(&class));
            }
            for (secs, long) in [(30, false), (150, true)] {
                for seed in 0..100 {
                    let p = plan(&mut Rng::new(seed), 8, secs, long, features);
                    let again = plan(&mut Rng::new(seed), 8, secs, long, features);
                    assert_eq!(p.actions, again.actions, "seed {seed}");
                    check(features, secs, long, seed, &p);
                }
            }
        }
    }

    /// The (time, node) of every action `pick` takes.
    fn picked(p: &Plan, pick: fn(&Action) -> Option<usize>) -> Vec<(u64, usize)> {
        p.actions
            .iter()
            .filter_map(|(t, a)| Some((*t, pick(a)?)))
            .collect()
    }

    /// Every backend's plans: the wipe once, as the last fault; an epoch change of up to a
    /// lease, both ways; and a rebuild of the stepped node after each clock step.
    #[test]
    fn every_plan_has_its_wipe_epoch_changes_and_rebuilds() {
        let (mut forms, mut signs) = ([0; 2], [0; 2]);
        every_plan(|features, secs, long, seed, p| {
            let w = picked(p, |a| match a {
                Action::Wipe(wide) => Some(usize::from(*wide)),
                _ => None,
            });
            assert_eq!(w.len(), 1, "seed {seed}: {:?}", p.actions);
            let (at, wide) = w[0];
            forms[wide] += 1;
            // Late: at the end of the planned time (8 s before its end) or later, and after
            // every other fault began.
            assert!(at >= secs * 1000 - 8_000, "seed {seed}: {at}");
            for (t, a) in &p.actions {
                if a.begins_fault() && !matches!(a, Action::Wipe(_)) {
                    assert!(*t < at, "seed {seed}: {a:?} at {t}, wipe at {at}");
                }
            }
            // Never against a server that is down or failing over: every server fault has
            // ended (the failover's hold-off past the promotion too).
            let mut server_free_at = 0;
            for (t, a) in &p.actions {
                match a {
                    Action::CoordinatorUp => server_free_at = t + 2_000,
                    Action::FailoverPromote => server_free_at = t + LEASE_MS + 2_000,
                    _ => {}
                }
            }
            assert!(at >= server_free_at, "seed {seed}: {:?}", p.actions);
            // Without server faults to wait for, the short run's wipe comes within its last
            // slot (22 s plus a third of the 3.4 s slot): the run ends 6 s later, at its
            // nominal 30 s, inside the wipe's hold-off.
            if !long && !features.server {
                assert!(at < 24_000, "seed {seed}: {at}");
            }

            let epochs: Vec<(usize, i64)> = p
                .actions
                .iter()
                .filter_map(|(_, a)| match a {
                    Action::Epoch(node, shift) => Some((*node, *shift)),
                    _ => None,
                })
                .collect();
            if long {
                assert!(!epochs.is_empty(), "seed {seed}");
            } else {
                assert_eq!(epochs.len(), 1, "seed {seed}: {:?}", p.actions);
            }
            for (node, shift) in epochs {
                assert!(node < 8);
                let lease = i64::try_from(LEASE_MS).unwrap();
                assert!(
                    (2_000..=lease).contains(&shift.abs()),
                    "seed {seed}: {shift}"
                );
                signs[usize::from(shift > 0)] += 1;
            }

            let steps = picked(p, |a| match a {
                Action::ClockStep(node) => Some(*node),
                _ => None,
            });
            let rebuilds = picked(p, |a| match a {
                Action::Rebuild(node) => Some(*node),
                _ => None,
            });
            assert!(!rebuilds.is_empty(), "seed {seed}");
            assert_eq!(steps.len(), rebuilds.len(), "seed {seed}: {:?}", p.actions);
            for (t, node) in &rebuilds {
                // 0.3-1 s after a step of that node: its clock is still stepped back (by at
                // least 2 margins, 1.5 s) past what its factories issued.
                assert!(
                    steps
                        .iter()
                        .any(|(s, n)| n == node && (s + 300..=s + 1_000).contains(t)),
                    "seed {seed}: {:?}",
                    p.actions
                );
                assert!(p.clocks[*node].get(1).1 >= 2 * MARGIN_MS);
            }
        });
        // Both wipe forms (DEL/DELETE and FLUSHALL/TRUNCATE), and earlier and later epochs,
        // over the seeds.
        assert!(forms[0] > 100 && forms[1] > 100, "{forms:?}");
        assert!(signs[0] > 100 && signs[1] > 100, "{signs:?}");
    }

    #[test]
    fn server_faults_never_overlap() {
        for seed in 0..200 {
            let p = plan(&mut Rng::new(seed), 8, 150, true, ALL);
            let mut down = false;
            for (_, a) in &p.actions {
                match a {
                    Action::CoordinatorDown | Action::FailoverLag => {
                        assert!(!down, "seed {seed}: {:?}", p.actions);
                        down = true;
                    }
                    Action::CoordinatorUp | Action::FailoverPromote => down = false,
                    _ => {}
                }
            }
            let failovers = p
                .actions
                .iter()
                .filter(|(_, a)| *a == Action::FailoverLag)
                .count();
            assert_eq!(failovers, 1, "seed {seed}");
        }
    }

    /// ZooKeeper's plans: every class once in a short run (a member's kill, the leader's,
    /// every member's, a member cut off, a member slowed); the server faults one at a time,
    /// each ended by one restart; the faults of one member's proxies one at a time, each healed.
    #[test]
    fn ensemble_plans_kill_members_and_cut_them_off_one_at_a_time() {
        for (secs, long) in [(30, false), (150, true)] {
            for seed in 0..100 {
                let p = plan(&mut Rng::new(seed), 8, secs, long, ENSEMBLE);
                let count = |f: fn(&Action) -> bool| p.actions.iter().filter(|(_, x)| f(x)).count();
                let member = count(|a| matches!(a, Action::MemberDown(m) if *m < 3));
                let leader = count(|a| *a == Action::LeaderDown);
                let all = count(|a| *a == Action::CoordinatorDown);
                let cuts = count(|a| matches!(a, Action::MemberCut(m, true) if *m < 3));
                let slow =
                    count(|a| matches!(a, Action::MemberLatency(m, ms) if *m < 3 && *ms > 0));
                if long {
                    assert!(member + leader + all + cuts + slow >= 5, "seed {seed}");
                } else {
                    assert_eq!(
                        (member, leader, all, cuts, slow),
                        (1, 1, 1, 1, 1),
                        "seed {seed}: {:?}",
                        p.actions
                    );
                }
                let (mut down, mut cut) = (false, None);
                for (_, a) in &p.actions {
                    match a {
                        Action::MemberDown(_) | Action::LeaderDown | Action::CoordinatorDown => {
                            assert!(!down, "seed {seed}: {:?}", p.actions);
                            down = true;
                        }
                        Action::CoordinatorUp => {
                            assert!(down, "seed {seed}: {:?}", p.actions);
                            down = false;
                        }
                        Action::MemberCut(m, true) | Action::MemberLatency(m, 1..) => {
                            assert_eq!(cut, None, "seed {seed}: {:?}", p.actions);
                            cut = Some(*m);
                        }
                        Action::MemberCut(m, false) | Action::MemberLatency(m, 0) => {
                            assert_eq!(cut, Some(*m), "seed {seed}: {:?}", p.actions);
                            cut = None;
                        }
                        _ => {}
                    }
                }
                assert!(!down && cut.is_none(), "seed {seed}: {:?}", p.actions);
            }
        }
        // The other backends' plans have none of them.
        let p = plan(&mut Rng::new(1), 8, 150, true, ALL);
        assert!(!p.actions.iter().any(|(_, a)| matches!(
            a,
            Action::MemberDown(_)
                | Action::LeaderDown
                | Action::MemberCut(..)
                | Action::MemberLatency(..)
        )));
    }

    #[test]
    fn clocks_spread_and_change_on_restart() {
        let p = plan(&mut Rng::new(3), 8, 30, false, ALL);
        let margin = i64::try_from(MARGIN_MS).unwrap();
        let mut first: Vec<i64> = p.clocks.iter().map(|c| c.get(1).0 / margin).collect();
        first.sort_unstable();
        assert_eq!(first, [-20, -5, -2, 0, 0, 2, 5, 20]);
        for c in &p.clocks {
            assert_ne!(c.get(1).0, c.get(2).0);
            let (_, step) = c.get(1);
            assert!((2 * MARGIN_MS..=20 * MARGIN_MS).contains(&step));
        }
        let long = plan(&mut Rng::new(3), 8, 150, true, ALL);
        assert!(
            long.clocks
                .iter()
                .any(|c| c.get(1).0.abs() == HOUR_EQUIVALENT * margin)
        );
    }
}
