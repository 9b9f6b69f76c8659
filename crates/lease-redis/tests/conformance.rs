//! The `lease-testkit` conformance suite on Valkey 9 and Redis 8.

mod common;

use common::{Key, Server};
use lease_core::MachineId;
use lease_redis::RedisStrategy;
use lease_redis::redis;
use lease_testkit::Harness;

/// One hash of its own per check, deleted afterwards.
struct RedisHarness {
    server: Server,
    key: Key,
}

impl RedisHarness {
    async fn new(server: Server) -> Self {
        drop(common::raw(&server).await);
        let key = Key::new(&server);
        Self { server, key }
    }
}

impl Harness for RedisHarness {
    type Strategy = RedisStrategy;

    async fn node(&self) -> RedisStrategy {
        common::strategy(&self.server, &self.key).await
    }

    /// Deletes the ID field and its marker, as an expiry would.
    async fn expire(&self, id: MachineId) -> bool {
        let mut connection = common::raw(&self.server).await;
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(&self.key.name)
            .query_async(&mut connection)
            .await
            .expect("HKEYS");
        let marker_prefix = format!("token.{id}.");
        let mut del = redis::cmd("HDEL");
        del.arg(&self.key.name).arg(id.get().to_string());
        for field in fields.iter().filter(|f| f.starts_with(&marker_prefix)) {
            del.arg(field);
        }
        let _: i64 = del.query_async(&mut connection).await.expect("HDEL");
        true
    }
}

fn options() -> lease_testkit::Options {
    lease_testkit::Options::new(std::time::Duration::from_secs(4))
}

mod valkey {
    lease_testkit::conformance_tests!(
        || super::RedisHarness::new(super::common::valkey()),
        super::options()
    );
}

mod redis8 {
    lease_testkit::conformance_tests!(
        || super::RedisHarness::new(super::common::redis8()),
        super::options()
    );
}
