//! PostgreSQL and MariaDB for `lease-sql`.

use super::Running;

/// Makes PostgreSQL and MariaDB available to the tests.
pub fn ensure(running: &mut Running) -> Result<(), String> {
    running.set_env(
        "NONONCE_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    );
    running.set_env("NONONCE_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
    Ok(())
}
