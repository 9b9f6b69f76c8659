//! The checks themselves. Each returns `Err(message)` on the first contract violation.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use lease_core::{
    Acquire, ErrorKind, Grant, LeaseError, MachineId, Release, Renew, Renewal, Strategy,
};
use tokio::time::{Instant, sleep, sleep_until};

use crate::{Harness, Options, Outcome};

pub(crate) type CheckResult = Result<Outcome, String>;

/// Attempts for an acquire answered `Retry` or `Conflict`: a lease manager would retry those.
const ACQUIRE_ATTEMPTS: u32 = 5;

pub(crate) fn describe<E: LeaseError>(error: &E) -> String {
    format!("{} error: {error}", error.kind())
}

/// `what`, then the error it ended with (see [`describe`]).
pub(crate) fn failed<E: LeaseError>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {}", describe(&e))
}

/// What the message of a check that outlasted its own leases begins with: such a check proves
/// nothing either way, and [`run_check`](crate::run_check) runs it again with longer leases
/// ([`is_too_slow`]).
const TOO_SLOW: &str = "the check was too slow to conclude";

/// Whether `message` (perhaps wrapped in context) says the check was too slow to conclude.
pub(crate) fn is_too_slow(message: &str) -> bool {
    message.contains(TOO_SLOW)
}

fn skip(why: &str) -> CheckResult {
    Ok(Outcome::Skipped(why.to_owned()))
}

/// Why a check that fills the store does not apply to a strategy that cannot hold every ID.
pub(crate) fn not_all_ids(so: &str) -> String {
    format!("strategy cannot hold all {} ids{so}", MachineId::COUNT)
}

/// Acquires, retrying answers the lease manager would retry.
async fn acquire<S: Strategy>(
    strategy: &S,
    options: &Options,
) -> Result<Grant<S::Lease>, S::Error> {
    let request = Acquire::new(options.ttl, 0, 0);
    retrying(ACQUIRE_ATTEMPTS, backoff, || strategy.acquire(request))
        .await
        .0
}

/// The pause after the `attempt`th acquire of a check was answered `Retry` or `Conflict`.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(10) * attempt
}

/// Calls `call` until it succeeds or fails with something other than `Retry` or `Conflict`,
/// at most `attempts` times, sleeping `pause(attempt)` after each retried one (what a lease
/// manager would do with an acquire); with the attempts made.
async fn retrying<T, E: LeaseError, F: Future<Output = Result<T, E>>>(
    attempts: u32,
    pause: impl Fn(u32) -> Duration,
    call: impl Fn() -> F,
) -> (Result<T, E>, u32) {
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e)
                if matches!(e.kind(), ErrorKind::Retry | ErrorKind::Conflict)
                    && attempt < attempts =>
            {
                sleep(pause(attempt)).await;
                attempt += 1;
            }
            result => return (result, attempt),
        }
    }
}

async fn must_acquire<S: Strategy>(
    strategy: &S,
    options: &Options,
    what: &str,
) -> Result<Grant<S::Lease>, String> {
    acquire(strategy, options)
        .await
        .map_err(|e| format!("{what}: acquire on an idle store failed: {}", describe(&e)))
}

/// What a failed renewal of a lease just acquired says.
const FRESH: &str = "renewing a fresh lease failed";

async fn must_renew<S: Strategy>(
    strategy: &S,
    lease: &S::Lease,
    options: &Options,
    what: &str,
) -> Result<Renewal<S::Lease>, String> {
    strategy
        .renew(lease, Renew::new(options.ttl, 0))
        .await
        .map_err(failed(what))
}

/// Acquires until the store refuses (at most 513 times), failing if it hands out an ID in `held`
/// or the same ID twice while the lease on it is still valid. Returns the grants and the
/// refusal.
///
/// `held_since` is when the oldest request behind a lease in `held` was sent. A lease is valid
/// for at least `min_ttl` from its request, less the slack for the store's clock: an ID handed
/// out again within that is a violation; one handed out again later proves nothing (the lease
/// may have run out while the store filled), and the fill fails saying it was too slow for the
/// harness's lease duration, not that the strategy broke its promise.
async fn fill<S: Strategy>(
    strategy: &S,
    options: &Options,
    held: &[MachineId],
    held_since: Instant,
) -> Result<(Vec<Grant<S::Lease>>, S::Error), String> {
    let validity = options.min_ttl.saturating_sub(options.slack);
    let started = Instant::now();
    let mut valid_until: HashMap<MachineId, Instant> =
        held.iter().map(|&id| (id, held_since + validity)).collect();
    let mut grants = Vec::new();
    for _ in 0..=MachineId::COUNT {
        let sent = Instant::now();
        match acquire(strategy, options).await {
            Ok(grant) => {
                let replied = Instant::now();
                let id = grant.machine_id;
                if let Some(&until) = valid_until.get(&id) {
                    if replied <= until {
                        return Err(format!(
                            "machine id {id} was handed out while a valid lease on it was held \
                             (after {} other grants)",
                            grants.len()
                        ));
                    }
                    let requested = until.checked_sub(validity).unwrap_or(until);
                    return Err(format!(
                        "{TOO_SLOW}: machine id {id} was handed out again {:?} after its lease \
                         was requested, longer than leases of at least {:?} last (the fill had \
                         made {} grants in {:?}), so it may have expired",
                        replied.duration_since(requested),
                        options.min_ttl,
                        grants.len(),
                        started.elapsed()
                    ));
                }
                valid_until.insert(id, sent + validity);
                grants.push(grant);
            }
            Err(e) => return Ok((grants, e)),
        }
    }
    Err(format!(
        "acquire granted more than {} leases at once",
        MachineId::COUNT
    ))
}

/// For [`still_valid`] since a fill that held every other ID began, when one of them is handed
/// out: the strategy did nothing wrong if the fillers' leases may have run out since.
const FILLERS: (&str, &str) = (
    "the store began to fill, the fillers' leases",
    "an id handed out again",
);

/// `Ok` while leases granted at `since` are surely valid; otherwise `Err` saying the check was
/// too slow to conclude: `since_whose` names the moment and the leases, `what` the outcome that
/// proves nothing once they may have run out by themselves.
fn still_valid(
    since: Instant,
    options: &Options,
    (since_whose, what): (&str, &str),
) -> Result<(), String> {
    let elapsed = since.elapsed();
    if elapsed + options.slack < options.min_ttl {
        return Ok(());
    }
    Err(format!(
        "{TOO_SLOW}: {elapsed:?} after {since_whose} of at least {:?} may have run out, so \
         {what} proves nothing",
        options.min_ttl
    ))
}

/// Fills the store and requires that every one of the 512 IDs is then held (see [`fill`]).
pub(crate) async fn fill_all<S: Strategy>(
    strategy: &S,
    options: &Options,
    held: &[MachineId],
    held_since: Instant,
) -> Result<Vec<Grant<S::Lease>>, String> {
    let (grants, refusal) = fill(strategy, options, held, held_since).await?;
    if grants.len() + held.len() != usize::from(MachineId::COUNT) {
        return Err(format!(
            "could hold only {} leases at once before {}; a strategy that cannot hold all {} \
             should not claim `holds_all_ids`",
            grants.len() + held.len(),
            describe(&refusal),
            MachineId::COUNT
        ));
    }
    Ok(grants)
}

/// Acquires up to `count` more leases and fails if one of them is for `id`.
async fn never_grants<S: Strategy>(
    strategy: &S,
    options: &Options,
    id: MachineId,
    count: usize,
    what: &str,
) -> Result<(), String> {
    let mut grants = Vec::new();
    for _ in 0..count {
        let Ok(grant) = strategy.acquire(Acquire::new(options.ttl, 0, 0)).await else {
            break;
        };
        if grant.machine_id == id {
            return Err(format!("{what}: machine id {id} was handed out again"));
        }
        // Keep it, so the next acquire has to pick another ID.
        grants.push(grant);
    }
    Ok(())
}

pub(crate) async fn distinct_ids<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if !options.capabilities.exclusive {
        return skip("strategy is not exclusive (static IDs)");
    }
    let nodes = join_all((0..options.concurrency).map(|_| harness.node())).await;
    let grants = join_all(nodes.iter().map(|node| acquire(node, options))).await;
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); usize::from(MachineId::COUNT)];
    for (node, grant) in grants.iter().enumerate() {
        match grant {
            Ok(grant) => holders[usize::from(grant.machine_id.get())].push(node),
            Err(e) => {
                return Err(format!(
                    "concurrent acquirer {node} of {} failed on a store with free ids: {}",
                    options.concurrency,
                    describe(e)
                ));
            }
        }
    }
    if let Some((id, nodes)) = holders.iter().enumerate().find(|(_, n)| n.len() > 1) {
        return Err(format!(
            "machine id {id} was granted to {} of {} concurrent acquirers (nodes {nodes:?}): \
             the claim must check and take the id in one atomic step",
            nodes.len(),
            options.concurrency
        ));
    }
    Ok(Outcome::Passed)
}

pub(crate) async fn renew_keeps_id<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    let node = harness.node().await;
    let sent = Instant::now();
    let grant = must_acquire(&node, options, "first acquire").await?;
    let id = grant.machine_id;
    let first = must_renew(&node, &grant.lease, options, FRESH).await?;
    let what = "renewing with the handle returned by renew failed";
    must_renew(&node, &first.lease, options, what).await?;
    let other = harness.node().await;
    let what = "after renewing the lease on it";
    if options.capabilities.holds_all_ids {
        fill_all(&other, options, &[id], sent)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    } else if options.capabilities.exclusive {
        never_grants(&other, options, id, options.concurrency, what).await?;
    }
    Ok(Outcome::Passed)
}

pub(crate) async fn renew_is_idempotent<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    let node = harness.node().await;
    let grant = must_acquire(&node, options, "first acquire").await?;
    must_renew(&node, &grant.lease, options, FRESH).await?;
    let what = "a renewal retried with the same handle (as after a lost reply) failed; match the \
                lease's token, not something the first renewal changed";
    let retried = must_renew(&node, &grant.lease, options, what).await?;
    let what = "renewing after a retried renewal failed";
    must_renew(&node, &retried.lease, options, what).await?;
    Ok(Outcome::Passed)
}

fn ttl_in_range(ttl: Duration, options: &Options, what: &str) -> Result<(), String> {
    if ttl > options.ttl {
        return Err(format!(
            "{what} granted {ttl:?}, more than the requested {:?}",
            options.ttl
        ));
    }
    if ttl < options.min_ttl {
        return Err(format!(
            "{what} granted {ttl:?}, less than the minimum {:?} (set `min_ttl` if the coordinator \
             caps TTLs on purpose)",
            options.min_ttl
        ));
    }
    Ok(())
}

pub(crate) async fn ttl_honoured<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    let node = harness.node().await;
    let grant = must_acquire(&node, options, "first acquire").await?;
    ttl_in_range(grant.ttl, options, "acquire")?;
    let sent = Instant::now();
    let renewal = must_renew(&node, &grant.lease, options, FRESH).await?;
    ttl_in_range(renewal.ttl, options, "renew")?;
    if options.capabilities.exclusive {
        let wait = renewal.ttl.saturating_sub(options.slack);
        sleep_until(sent + wait).await;
        let what = format!(
            "the lease ended before its granted ttl of {:?}: a renewal sent {wait:?} after the \
             previous one failed",
            renewal.ttl
        );
        must_renew(&node, &renewal.lease, options, &what).await?;
    }
    Ok(Outcome::Passed)
}

pub(crate) async fn lost_after_takeover<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if !options.capabilities.exclusive {
        return skip("strategy is not exclusive (static IDs)");
    }
    let old = harness.node().await;
    let sent = Instant::now();
    let old_grant = must_acquire(&old, options, "first acquire").await?;
    let id = old_grant.machine_id;
    if !harness.expire(id).await {
        sleep_until(sent + old_grant.ttl + options.slack).await;
    }

    // Take the expired ID with another node, holding every other ID it is given on the way.
    let new = harness.node().await;
    let taking = Instant::now();
    let mut others = Vec::new();
    let new_grant = loop {
        match acquire(&new, options).await {
            Ok(grant) if grant.machine_id == id => break grant,
            Ok(grant) if others.len() < usize::from(MachineId::MAX) => others.push(grant),
            Ok(_) => {
                return Err(format!(
                    "handed out more than {} other ids but never the expired id {id}",
                    MachineId::MAX
                ));
            }
            Err(e) => {
                return Err(format!(
                    "after the lease on machine id {id} expired, another node could not acquire \
                     it ({} after {} other grants)",
                    describe(&e),
                    others.len()
                ));
            }
        }
    };

    for attempt in ["renewing", "retrying the renewal of"] {
        let renewal = old.renew(&old_grant.lease, Renew::new(options.ttl, 0));
        match renewal.await {
            Err(e) if e.kind() == ErrorKind::Lost => {}
            Ok(_) => {
                return Err(format!(
                    "{attempt} the expired lease on machine id {id} succeeded although another \
                     node acquired {id} since: two nodes now use it (match the renewal on the \
                     lease's token)"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "{attempt} a lease whose id another node took must fail with kind lost, got \
                     {}",
                    describe(&e)
                ));
            }
        }
    }
    let renewed_at = Instant::now();
    let what =
        format!("the new holder of machine id {id} could not renew after the old holder tried");
    let renewed = must_renew(&new, &new_grant.lease, options, &what).await?;

    // Let the rest of the store fill up, so a wrongly freed ID would have to be handed out.
    let filler = harness.node().await;
    let mut held: Vec<MachineId> = others.iter().map(|g| g.machine_id).collect();
    held.push(id);
    let fillers = if options.capabilities.holds_all_ids {
        fill_all(&filler, options, &held, taking)
            .await
            .map_err(|e| format!("filling the store after the takeover: {e}"))?
    } else {
        Vec::new()
    };

    // Release is best effort: an error is fine, freeing the new holder's lease is not.
    let _ = old
        .release(&old_grant.lease, Release::new(options.guard, 0))
        .await;
    let released = Instant::now();
    let freed: Result<(), String> = async {
        // No renewal of the new holder until after the guard: it would hide a release that
        // shortened the new holder's lease to the guard.
        let what = "releasing the old holder's handle freed the new holder's lease";
        never_grants(&filler, options, id, options.concurrency, what).await?;
        sleep_until(released + options.guard + options.slack).await;
        let what =
            "after the guard, releasing the old holder's handle had freed the new holder's lease";
        must_renew(&new, &renewed.lease, options, what).await?;
        never_grants(&filler, options, id, options.concurrency, what).await
    }
    .await;
    if let Err(freed) = freed {
        // Losing the new holder's lease proves nothing once it may have run out by itself.
        let lease = ("the new holder renewed, its lease", "losing it");
        still_valid(renewed_at, options, lease)?;
        return Err(freed);
    }
    drop(fillers);
    Ok(Outcome::Passed)
}

pub(crate) async fn release_guard<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if !options.capabilities.holds_all_ids {
        return skip(&not_all_ids(", so a freed id may go unnoticed"));
    }
    let node = harness.node().await;
    let acquired = Instant::now();
    let grant = must_acquire(&node, options, "first acquire").await?;
    let id = grant.machine_id;
    let filler = harness.node().await;
    let filled_from = Instant::now();
    let _fillers = fill_all(&filler, options, &[id], acquired).await?;

    let sent = Instant::now();
    node.release(&grant.lease, Release::new(options.guard, 0))
        .await
        .map_err(failed("release of a valid lease failed"))?;
    let replied = Instant::now();
    // No retries here: they would wait, and the point is to ask within the guard.
    if let Ok(again) = filler.acquire(Acquire::new(options.ttl, 0, 0)).await {
        let elapsed = sent.elapsed();
        if again.machine_id != id {
            still_valid(filled_from, options, FILLERS)?;
            return Err(format!(
                "after releasing {id}, acquire handed out machine id {} which was still held",
                again.machine_id
            ));
        }
        if elapsed < options.guard {
            return Err(format!(
                "released machine id {id} was handed out again {elapsed:?} after the release was \
                 sent, within the guard of {:?}: release must keep the id blocked until \
                 now + guard",
                options.guard
            ));
        }
        return Err(format!(
            "{TOO_SLOW}: {elapsed:?} passed between release and acquire, more than the guard \
             of {:?}",
            options.guard
        ));
    }
    sleep_until(replied + options.guard + options.slack).await;
    match acquire(&filler, options).await {
        Ok(again) if again.machine_id == id => Ok(Outcome::Passed),
        Ok(again) => still_valid(filled_from, options, FILLERS).and(Err(format!(
            "after the guard, acquire handed out machine id {} which was still held, instead of \
             the released {id}",
            again.machine_id
        ))),
        Err(e) => Err(format!(
            "released machine id {id} was still blocked {:?} after the release replied (guard \
             {:?} plus slack): {}",
            options.guard + options.slack,
            options.guard,
            describe(&e)
        )),
    }
}

pub(crate) async fn exhausted<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if !options.capabilities.holds_all_ids {
        return skip(&not_all_ids(""));
    }
    let node = harness.node().await;
    let (grants, refusal) = fill(&node, options, &[], Instant::now()).await?;
    if grants.len() != usize::from(MachineId::COUNT) {
        return Err(format!(
            "acquire stopped after {} leases with {}; expected {} distinct ids, then exhausted",
            grants.len(),
            describe(&refusal),
            MachineId::COUNT
        ));
    }
    if refusal.kind() != ErrorKind::Exhausted {
        return Err(format!(
            "with all {} ids held, acquire must fail with kind exhausted, got {}",
            MachineId::COUNT,
            describe(&refusal)
        ));
    }
    Ok(Outcome::Passed)
}

pub(crate) async fn deterministic<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    let node = harness.node().await;
    if !node.profile().deterministic {
        return skip("strategy is not deterministic");
    }
    let first = must_acquire(&node, options, "first acquire").await?;
    let id = first.machine_id;
    let _ = node
        .release(&first.lease, Release::new(options.guard, 0))
        .await;
    if options.capabilities.exclusive {
        // The released ID is blocked for the guard, even for the same node.
        sleep(options.guard + options.slack).await;
    } else {
        let again = must_acquire(&node, options, "acquire after release").await?;
        if again.machine_id != id {
            return Err(format!(
                "deterministic strategy gave machine id {id}, then {} to the same node",
                again.machine_id
            ));
        }
    }
    let other = harness.node().await;
    let fresh = must_acquire(&other, options, "acquire by a new instance").await?;
    if fresh.machine_id != id {
        return Err(format!(
            "deterministic strategy gave machine id {id}, then {} to a new instance for the \
             same node",
            fresh.machine_id
        ));
    }
    Ok(Outcome::Passed)
}

/// Acquires at `now_ms` with a floor, retrying answers the lease manager would retry.
pub(crate) async fn acquire_recording<S: Strategy>(
    strategy: &S,
    options: &Options,
    now_ms: u64,
    floor_ms: u64,
) -> Result<Grant<S::Lease>, String> {
    let request = Acquire::new(options.ttl, now_ms, floor_ms);
    retrying(ACQUIRE_ATTEMPTS, backoff, || strategy.acquire(request))
        .await
        .0
        .map_err(|e| describe(&e))
}

/// The floor below which the checks' own floors start; far below any real clock, so a store
/// left behind by the check holds no floor that a real node would have to wait for.
pub(crate) const FLOOR_BASE: u64 = 1_000_000;

/// Attempts of one herd node: 512 acquirers on one store lose many races (`Conflict`) or find
/// the store busy (`Retry`) before each holds an ID.
const HERD_ATTEMPTS: u32 = 1000;

/// Acquires for herd node `node` with its own floor, retrying what a lease manager would retry,
/// after a pause that differs from node to node so the losers of a race do not meet again.
async fn herd_acquire<S: Strategy>(
    strategy: &S,
    options: &Options,
    node: usize,
    floor_ms: u64,
) -> Result<(Grant<S::Lease>, u32), String> {
    let pause = Duration::from_micros(u64::try_from(node % 97).unwrap_or(0) * 20);
    let request = Acquire::new(options.ttl, 0, floor_ms);
    let (result, attempts) = retrying(HERD_ATTEMPTS, |_| pause, || strategy.acquire(request)).await;
    result.map(|grant| (grant, attempts - 1)).map_err(|e| {
        format!(
            "herd node {node} got no id after {attempts} attempts: {}",
            describe(&e)
        )
    })
}

/// The floor herd node `node` claims with: distinct per node, so the floor stored with an ID
/// names the node that wrote it.
fn herd_floor(node: usize) -> u64 {
    FLOOR_BASE + 10_000 + u64::try_from(node).unwrap_or(u64::MAX - FLOOR_BASE - 10_000)
}

pub(crate) async fn herd<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if !options.capabilities.holds_all_ids {
        let so = format!(", so {} acquirers cannot all get one", MachineId::COUNT);
        return skip(&not_all_ids(&so));
    }
    let count = usize::from(MachineId::COUNT);
    // Every node made before the first claim, so the claims race each other and not the
    // connections being opened.
    let mut nodes = Vec::with_capacity(count);
    for _ in 0..count {
        nodes.push(harness.node().await);
    }
    let started = Instant::now();
    let grants = join_all(
        nodes
            .iter()
            .enumerate()
            .map(|(node, strategy)| herd_acquire(strategy, options, node, herd_floor(node))),
    )
    .await;
    let finished = Instant::now();
    let mut winner: HashMap<MachineId, usize> = HashMap::new();
    // The floor each winner's grant reported: what the ID held when it was claimed.
    let mut found: HashMap<MachineId, u64> = HashMap::new();
    let mut held = Vec::with_capacity(count);
    let mut retried = 0;
    for (node, grant) in grants.into_iter().enumerate() {
        let (grant, retries) = grant?;
        retried += retries;
        let id = grant.machine_id;
        found.insert(id, grant.floor_ms);
        if let Some(first) = winner.insert(id, node) {
            still_valid(started, options, FILLERS)?;
            return Err(format!(
                "machine id {id} was granted to herd nodes {first} and {node} of {count}: the \
                 claim must check and take the id in one atomic step"
            ));
        }
        held.push(grant);
    }
    // The figure docs/performance.md reports (shown with `--nocapture`).
    println!(
        "herd on `{}`: {count} acquirers, all distinct and held after {} ms, {retried} \
         answers conflict or retry",
        nodes[0].profile().name,
        finished.duration_since(started).as_millis()
    );

    if !nodes[0].profile().records_floor {
        return Ok(Outcome::Passed);
    }
    // Every lease ends without a release. The next holder of each ID must see the floor of the
    // node that won it, and only that: a claim that lost its race and still wrote its floor to
    // the ID leaves a floor that names another node. Unless the winner's grant reported a
    // higher one already: a claim that took the ID before it, and whose answer did not come
    // back in time, was given up by its node (lease-etcd revokes its key), and the floor it
    // raised stays raised (a floor only rises: that costs the ID's next holder time, never
    // uniqueness).
    let mut expired = true;
    for grant in &held {
        // Stops at the first ID the harness cannot expire.
        expired = expired && harness.expire(grant.machine_id).await;
    }
    if !expired {
        sleep_until(finished + options.ttl + options.slack).await;
    }
    drop(held);
    let filler = harness.node().await;
    let grants = fill_all(&filler, options, &[], Instant::now())
        .await
        .map_err(|e| format!("after the herd's leases ended: {e}"))?;
    for grant in &grants {
        let id = grant.machine_id;
        let node = winner[&id];
        let expected = herd_floor(node).max(found[&id]);
        match grant.floor_ms {
            f if f == expected => {}
            0 => {
                return Err(format!(
                    "machine id {id}, won by herd node {node} with a floor of {}, reports no \
                     floor to its next holder: the claim must record its floor",
                    herd_floor(node)
                ));
            }
            f => {
                let by = f
                    .checked_sub(herd_floor(0))
                    .map_or_else(|| "no herd node".to_owned(), |n| format!("herd node {n}"));
                return Err(format!(
                    "machine id {id}, won by herd node {node} with a floor of {}, reports {f} \
                     (the floor of {by}) to its next holder: only the claim that takes an id may \
                     write its floor",
                    herd_floor(node)
                ));
            }
        }
    }
    Ok(Outcome::Passed)
}

/// A renewal of `lease` that must be lost, since the lease was released.
async fn late_renewal<S: Strategy>(
    strategy: &S,
    lease: &S::Lease,
    options: &Options,
    floor_ms: u64,
    when: &str,
) -> Result<(), String> {
    let renewal = strategy.renew(lease, Renew::new(options.ttl, floor_ms));
    match renewal.await {
        Ok(_) => Err(format!(
            "a renewal {when} succeeded: a renewal that reaches the store after the release \
             (sent before it and delayed, or resent after a reconnect) must be lost and extend \
             nothing"
        )),
        Err(e) if e.kind() == ErrorKind::Lost => Ok(()),
        Err(e) => Err(format!(
            "a renewal {when} must fail with kind lost, got {}",
            describe(&e)
        )),
    }
}

pub(crate) async fn renew_after_release<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if !options.capabilities.holds_all_ids {
        return skip(&not_all_ids(
            ", so an id the late renewal kept may go unnoticed",
        ));
    }
    let node = harness.node().await;
    let records_floor = node.profile().records_floor;
    let acquired = Instant::now();
    let grant = must_acquire(&node, options, "first acquire").await?;
    let id = grant.machine_id;
    let filler = harness.node().await;
    let fillers = fill_all(&filler, options, &[id], acquired).await?;

    let released = FLOOR_BASE + 2000;
    let late = FLOOR_BASE + 5000;
    node.release(&grant.lease, Release::new(options.guard, released))
        .await
        .map_err(failed("release of a valid lease failed"))?;
    let released_at = Instant::now();
    let renew_late = |when| late_renewal(&node, &grant.lease, options, late, when);
    renew_late("within the release guard").await?;
    node.release(&grant.lease, Release::new(options.guard, released))
        .await
        .map_err(failed("a retried release (as after a lost reply) failed"))?;
    renew_late("after a retried release").await?;
    // The fillers must outlast the guard.
    let filled_from = Instant::now();
    renew_all(&filler, &fillers, options).await?;

    sleep_until(released_at + options.guard + options.slack).await;
    renew_late("after the release guard").await?;
    let again = match acquire_recording(&filler, options, 0, FLOOR_BASE + 10).await {
        Ok(again) if again.machine_id == id => again,
        Ok(again) => {
            still_valid(filled_from, options, FILLERS)?;
            return Err(format!(
                "after releasing {id}, acquire handed out machine id {} which was still held",
                again.machine_id
            ));
        }
        Err(e) => {
            return Err(format!(
                "released machine id {id} was still blocked {:?} after the release (guard {:?} \
                 plus slack): the renewals sent after the release extended it ({e})",
                options.guard + options.slack,
                options.guard
            ));
        }
    };
    if records_floor && again.floor_ms != released {
        return Err(format!(
            "machine id {id} released with a floor of {released} reports {} to its next holder: \
             a renewal after the release (floor {late}) must not move the floor",
            again.floor_ms
        ));
    }
    renew_late("on the id's next holder").await?;
    let what =
        format!("the next holder of machine id {id} could not renew after the old handle tried");
    must_renew(&filler, &again.lease, options, &what).await?;

    // Released with no guard: free at once, and a renewal that arrives afterwards still lost.
    filler
        .release(&again.lease, Release::new(Duration::ZERO, released + 1))
        .await
        .map_err(failed("release with no guard failed"))?;
    let when = "after a release with no guard";
    late_renewal(&filler, &again.lease, options, late, when).await?;
    drop(fillers);
    Ok(Outcome::Passed)
}

/// Renews every filler lease, so they outlast a wait of up to the minimum TTL.
pub(crate) async fn renew_all<S: Strategy>(
    strategy: &S,
    grants: &[Grant<S::Lease>],
    options: &Options,
) -> Result<(), String> {
    for grant in grants {
        let id = grant.machine_id;
        let what = format!("renewing the lease that fills machine id {id}");
        must_renew(strategy, &grant.lease, options, &what).await?;
    }
    Ok(())
}
