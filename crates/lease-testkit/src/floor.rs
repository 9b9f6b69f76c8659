//! The timestamp-floor checks. A strategy that [records floors](lease_core::Profile::records_floor)
//! stores one with each ID; the checks read it as a node does, in the grant of the ID's next
//! holder ([`Grant::floor_ms`]): with every other ID held, the ID whose lease ends is the one
//! the next acquire must hand out.

use std::time::Duration;

use lease_core::{ErrorKind, Grant, LeaseError, MachineId, Release, Renew, Strategy};
use tokio::time::{Instant, sleep_until};

use crate::checks::{
    CheckResult, FLOOR_BASE, acquire_recording, failed, fill_all, not_all_ids, renew_all,
};
use crate::{Harness, Options, Outcome};

type Lease<H> = <<H as Harness>::Strategy as Strategy>::Lease;
type Held<H> = (<H as Harness>::Strategy, Grant<Lease<H>>);

/// Why the floor checks do not apply to the strategy of `node`, if they do not.
fn not_applying<S: Strategy>(node: &S, options: &Options) -> Option<CheckResult> {
    let why = if !node.profile().records_floor {
        "strategy stores no timestamp floor (its profile's `records_floor` is false)".to_owned()
    } else if !options.capabilities.holds_all_ids {
        not_all_ids(", so the check cannot choose which id is handed over")
    } else {
        return None;
    };
    Some(Ok(Outcome::Skipped(why)))
}

/// One ID handed from holder to holder, every other ID held by `filler` meanwhile.
struct Handover<'a, H: Harness> {
    harness: &'a H,
    options: &'a Options,
    id: MachineId,
    filler: H::Strategy,
    fillers: Vec<Grant<Lease<H>>>,
}

impl<'a, H: Harness> Handover<'a, H> {
    /// A new node acquires with `floor_ms` on an idle store, then every other ID is filled.
    async fn start(
        harness: &'a H,
        options: &'a Options,
        floor_ms: u64,
    ) -> Result<(Self, Held<H>), String> {
        let first = harness.node().await;
        let sent = Instant::now();
        let grant = acquire_recording(&first, options, 0, floor_ms)
            .await
            .map_err(|e| format!("acquire with a floor on an idle store failed: {e}"))?;
        let filler = harness.node().await;
        let fillers = fill_all(&filler, options, &[grant.machine_id], sent).await?;
        let id = grant.machine_id;
        let handover = Self {
            harness,
            options,
            id,
            filler,
            fillers,
        };
        Ok((handover, (first, grant)))
    }

    /// Ends the lease on `id` in the store ([`Harness::expire`]), or waits out `ttl` while the
    /// fillers' leases stay valid.
    async fn end(&self, id: MachineId, ttl: Duration) -> Result<(), String> {
        if self.harness.expire(id).await {
            return Ok(());
        }
        let from = Instant::now();
        for until in [from, from + ttl / 2] {
            sleep_until(until).await;
            renew_all(&self.filler, &self.fillers, self.options).await?;
        }
        sleep_until(from + ttl + self.options.slack).await;
        Ok(())
    }

    /// A new node acquires with `now_ms` and `floor_ms`, and must be handed the ID, the only
    /// free one.
    async fn next(&self, now_ms: u64, floor_ms: u64, when: &str) -> Result<Held<H>, String> {
        let node = self.harness.node().await;
        let grant = acquire_recording(&node, self.options, now_ms, floor_ms)
            .await
            .map_err(|e| format!("{when}, acquiring machine id {} failed: {e}", self.id))?;
        if grant.machine_id != self.id {
            return Err(format!(
                "{when}, with every other id held, acquire handed out {} instead of {}",
                grant.machine_id, self.id
            ));
        }
        Ok((node, grant))
    }

    /// Ends `held`'s lease; the next holder acquires with `floor_ms` and must be told `expected`,
    /// as `why` says.
    async fn take(
        &self,
        held: &Grant<Lease<H>>,
        floor_ms: u64,
        expected: u64,
        why: &str,
    ) -> Result<Held<H>, String> {
        self.end(self.id, held.ttl).await?;
        let next = self.next(0, floor_ms, "after the lease ended").await?;
        if next.1.floor_ms != expected {
            return Err(format!(
                "the next holder of machine id {} was told a floor of {}, not {expected}: {why}",
                self.id, next.1.floor_ms
            ));
        }
        Ok(next)
    }
}

/// Renews `lease` with `floor_ms`; with `lost`, it must be [`ErrorKind::Lost`].
async fn renew<S: Strategy>(
    node: &S,
    lease: &S::Lease,
    floor_ms: u64,
    options: &Options,
    lost: bool,
) -> Result<(), String> {
    let renewal = node.renew(lease, Renew::new(options.ttl, floor_ms)).await;
    match (renewal, lost) {
        (Ok(_), false) => Ok(()),
        (Err(e), true) if e.kind() == ErrorKind::Lost => Ok(()),
        (Ok(_), true) => Err("the renewal of a lease whose id was taken over succeeded".into()),
        (Err(e), _) => Err(failed("renewing with a floor")(e)),
    }
}

/// [`Check::FloorTravels`](crate::Check::FloorTravels).
pub(crate) async fn floor_travels<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if let Some(skipped) = not_applying(&harness.node().await, options) {
        return skipped;
    }
    // The first holder records a floor on acquire, raises it on renew, and must not lower it
    // by renewing with less.
    let (handover, (first, grant)) = Handover::start(harness, options, FLOOR_BASE + 100).await?;
    let id = handover.id;
    renew(&first, &grant.lease, FLOOR_BASE + 1000, options, false).await?;
    renew(&first, &grant.lease, FLOOR_BASE + 500, options, false).await?;
    let recorded = grant.floor_ms.max(FLOOR_BASE + 1000);

    // The first lease ends without a release: its floor must survive.
    handover.end(id, grant.ttl).await?;
    let (second, taken) = handover
        .next(0, FLOOR_BASE + 10, "after the lease expired")
        .await?;
    match taken.floor_ms {
        f if f == recorded => {}
        0 => {
            return Err(format!(
                "the grant of machine id {id} after its lease expired reports no floor, though \
                 the earlier holder recorded {recorded}: the floor must be stored with the id and \
                 survive expiry"
            ));
        }
        f if f == FLOOR_BASE + 500 => {
            return Err(format!(
                "a renewal with a lower floor replaced the higher one ({recorded}) of machine id \
                 {id}: renew must keep the larger of the stored and the given floor"
            ));
        }
        f => {
            return Err(format!(
                "after the first holder of machine id {id} recorded a floor of {recorded}, the \
                 next grant reported {f}"
            ));
        }
    }

    // The second holder releases with the exact bound of what it issued. Then the first
    // holder, whose lease was lost, releases it too (as the lease manager does after a loss):
    // a higher floor must raise the stored one (a coordinator that forgot the lease learns
    // what was issued under it), a lower one must not lower it.
    let released = FLOOR_BASE + 2000;
    second
        .release(&taken.lease, Release::new(options.guard, released))
        .await
        .map_err(failed("release with a floor failed"))?;
    let released_at = Instant::now();
    renew_all(&handover.filler, &handover.fillers, options).await?;
    let raised = FLOOR_BASE + 3000;
    first
        .release(&grant.lease, Release::new(options.guard, raised))
        .await
        .map_err(failed("releasing a lost lease with a floor failed"))?;
    let _ = first
        .release(&grant.lease, Release::new(options.guard, FLOOR_BASE + 1))
        .await;
    sleep_until(released_at + options.guard + options.slack).await;
    let (_, again) = handover
        .next(0, FLOOR_BASE + 10, "after the release")
        .await?;
    match again.floor_ms {
        f if f == raised => Ok(Outcome::Passed),
        f if f == FLOOR_BASE + 1 => Err(format!(
            "a release by a holder whose lease on machine id {id} had expired and been taken set \
             the floor: release must match the token before it sets the floor, and may only \
             raise it otherwise"
        )),
        f if f == released => Err(format!(
            "a release of a lost lease on machine id {id} with a floor of {raised}, above the \
             stored {released}, did not raise it: a lost lease's release must raise the floor \
             to what was issued under it (a coordinator that forgot the lease forgot its floor)"
        )),
        f => Err(format!(
            "after the holder of machine id {id} released it with a floor of {released} and the \
             holder it was lost by with {raised}, the next grant reported {f}: release must \
             store the floor it is given, and a lost lease's release raise it"
        )),
    }
}

/// [`Check::FloorRecorded`](crate::Check::FloorRecorded).
pub(crate) async fn floor_recorded<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if let Some(skipped) = not_applying(&harness.node().await, options) {
        return skipped;
    }
    let floor = |offset: u64| FLOOR_BASE + offset;
    let (handover, (_first_node, first)) = Handover::start(harness, options, floor(100)).await?;
    let id = handover.id;
    if first.floor_ms != 0 {
        return Err(format!(
            "the first grant of machine id {id} on a new store reports a floor of {}, not 0",
            first.floor_ms
        ));
    }
    let why = "acquire must record its floor with the id";
    let (_second_node, second) = handover.take(&first, floor(50), floor(100), why).await?;
    let why = "an acquire with a lower floor must keep the higher one stored";
    let (node, third) = handover.take(&second, floor(70), floor(100), why).await?;
    renew(&node, &third.lease, floor(300), options, false).await?;
    renew(&node, &third.lease, floor(200), options, false).await?;
    let why = "renew must raise the floor, and a renewal with a lower floor keep the higher one";
    let (stale, fourth) = handover.take(&third, floor(400), floor(300), why).await?;
    let why = "acquire must raise the stored floor to the higher one it is given";
    let (_fifth_node, fifth) = handover.take(&fourth, 0, floor(400), why).await?;
    // The fourth holder's lease was taken over: it may touch the floor no more.
    renew(&stale, &fourth.lease, floor(9000), options, true).await?;
    let _ = stale
        .release(&fourth.lease, Release::new(options.guard, floor(1)))
        .await;
    let why = "a holder whose lease was taken over must not raise the floor by renewing, nor \
               lower it by releasing";
    let _sixth = handover.take(&fifth, 0, floor(400), why).await?;

    let Some(held) = harness.force_release(id).await else {
        return Ok(Outcome::Passed);
    };
    if !held {
        return Err(format!(
            "force release of the held machine id {id} answered false"
        ));
    }
    let (_, after) = handover.next(0, 0, "after a force release").await?;
    if after.floor_ms < floor(400) {
        return Err(format!(
            "after a force release, the next holder of machine id {id} was told a floor of {}, \
             below the {} stored before: a force release must keep the floor",
            after.floor_ms,
            floor(400)
        ));
    }
    Ok(Outcome::Passed)
}

/// Rounds of [`floor_preferred`]: a strategy that picks one of two free IDs at random, ignoring
/// floors, passes them all once in 2^8 runs.
const PREFERENCE_ROUNDS: usize = 8;

/// [`Check::FloorPreferred`](crate::Check::FloorPreferred).
pub(crate) async fn floor_preferred<H: Harness>(harness: &H, options: &Options) -> CheckResult {
    if let Some(skipped) = not_applying(&harness.node().await, options) {
        return skipped;
    }
    // Two free IDs: the handed-over one with a floor ahead of the acquirers' clock, a filler's
    // with none.
    let (now, ahead) = (FLOOR_BASE + 50_000, FLOOR_BASE + 100_000);
    let (mut handover, (_first_node, first)) = Handover::start(harness, options, ahead).await?;
    let Some(behind) = handover.fillers.pop() else {
        return Err("the fill held no other id".into());
    };
    let (id, other) = (handover.id, behind.machine_id);
    handover.end(id, first.ttl).await?;
    let node = harness.node().await;
    for round in 0..PREFERENCE_ROUNDS {
        handover.end(other, behind.ttl).await?;
        let grant = acquire_recording(&node, options, now, 0)
            .await
            .map_err(|e| format!("acquiring with two free ids failed: {e}"))?;
        if grant.machine_id != other {
            return Err(format!(
                "with machine ids {id} (floor {ahead}) and {other} (no floor) free, an acquirer \
                 whose clock is at {now} was handed {} (round {round}): acquire must prefer a \
                 free id whose floor is below the acquirer's clock",
                grant.machine_id
            ));
        }
    }
    // The only free ID left is ahead: it is handed out all the same, with its floor.
    let (_, last) = handover
        .next(now, 0, "with only an id ahead of the clock free")
        .await?;
    if last.floor_ms != ahead {
        return Err(format!(
            "machine id {id}, free with a floor of {ahead}, was handed out reporting {}",
            last.floor_ms
        ));
    }
    Ok(Outcome::Passed)
}
