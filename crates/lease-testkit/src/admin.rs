//! A check that a store's operator commands ([`StoreAdmin`]) agree with its strategy.

use std::time::Duration;

use lease_core::{Acquire, ErrorKind, LeaseError, MachineId, Renew, StoreAdmin, Strategy};

/// Acquires an ID through `store` (for `requested`) and checks that the operator commands of
/// the same store see it: the ID is among the holders, the free count is one lower, force
/// releasing it answers `true` and a second time `false`, then the ID is gone from the
/// holders, the free count is back and the freed lease's renewal is [`ErrorKind::Lost`].
///
/// Give it a store of its own (a table, hash or prefix that nothing else uses while it runs):
/// the free count is compared before and after.
///
/// # Errors
/// What disagreed, or a store error, in words.
pub async fn admin_agrees<S>(store: &S, requested: Duration) -> Result<(), String>
where
    S: Strategy + StoreAdmin,
{
    let say = |what: &str, e: &dyn LeaseError| format!("{what}: {}: {e}", e.kind());
    let free_count = async || store.free_count().await.map_err(|e| say("free_count", &e));
    let free_before = free_count().await?;
    let grant = store
        .acquire(Acquire::new(requested, 0, 0))
        .await
        .map_err(|e| say("acquire", &e))?;
    let id = grant.machine_id;
    let force_release = async || {
        let answer = store.force_release(id).await;
        answer.map_err(|e| say("force_release", &e))
    };
    let held = held_ids(store).await?;
    if !held.contains(&id) {
        return Err(format!("holders {held:?} do not list the acquired id {id}"));
    }
    let free_held = free_count().await?;
    if free_held + 1 != free_before {
        return Err(format!(
            "free count {free_held} with id {id} held, {free_before} before: not one lower"
        ));
    }
    if !force_release().await? {
        return Err(format!("force_release({id}) of a held id answered false"));
    }
    if force_release().await? {
        return Err(format!("force_release({id}) of a freed id answered true"));
    }
    let held = held_ids(store).await?;
    if held.contains(&id) {
        return Err(format!("holders {held:?} still list the freed id {id}"));
    }
    let free_after = free_count().await?;
    if free_after != free_before {
        return Err(format!(
            "free count {free_after} after force_release({id}), {free_before} before the acquire"
        ));
    }
    match store.renew(&grant.lease, Renew::new(requested, 0)).await {
        Err(e) if e.kind() == ErrorKind::Lost => Ok(()),
        Err(e) => Err(say("renew of the freed lease, expected lost", &e)),
        Ok(_) => Err(format!("the freed lease of id {id} renewed")),
    }
}

/// The IDs `store` lists as held.
async fn held_ids<S: StoreAdmin>(store: &S) -> Result<Vec<MachineId>, String> {
    let holders = store
        .holders()
        .await
        .map_err(|e| format!("holders: {}: {e}", e.kind()))?;
    Ok(holders.into_iter().map(|h| h.machine_id).collect())
}
