//! openraft's own storage conformance suite against [`LogStore`] and
//! [`StateMachine`] on fresh SQLite files in temp dirs.
#![allow(clippy::unwrap_used)] // unwrap is fine in tests

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageIOError;
use tempfile::TempDir;
use uagate_pair::{LogStore, PairConfig, StateMachine, StorageError};
use uagate_store::Store;

/// Builds a log store and a state machine over a new store, each on its
/// own file in one temp dir (kept alive by the returned guard).
struct FreshFiles;

impl StoreBuilder<PairConfig, LogStore, StateMachine, TempDir> for FreshFiles {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let log = LogStore::open(&dir.path().join("raft-log.db"))
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        let store = Store::open(&dir.path().join("config.db"))
            .await
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        let sm = StateMachine::new(store, &dir.path().join("snapshots"))
            .await
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        Ok((dir, log, sm))
    }
}

/// Every test of the suite (`Suite::test_all` runs each on fresh files,
/// in its own tokio runtime, and fails on the first failure).
#[test]
fn openraft_storage_suite() {
    Suite::test_all(FreshFiles).unwrap();
}

type PairSuite = Suite<PairConfig, LogStore, StateMachine, FreshFiles, TempDir>;

/// Runs one test of the suite on fresh files, in a runtime of its own (as
/// `Suite::test_all` does), so each shows up, and fails, on its own.
fn run_one<F, Fu>(test: F)
where
    F: FnOnce(LogStore, StateMachine) -> Fu,
    Fu: std::future::Future<Output = Result<(), StorageError>>,
{
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (_dir, log, sm) = FreshFiles.build().await.unwrap();
        test(log, sm).await.unwrap();
    });
}

/// One `#[test]` per test of the suite, by its name in
/// `openraft::testing::Suite`.
macro_rules! suite_tests {
    ($($name:ident),* $(,)?) => {
        mod each {
            use super::*;
            $(
                #[test]
                fn $name() {
                    run_one(PairSuite::$name);
                }
            )*
        }
    };
}

suite_tests!(
    last_membership_in_log_initial,
    last_membership_in_log,
    last_membership_in_log_multi_step,
    get_membership_initial,
    get_membership_from_log_and_empty_sm,
    get_membership_from_empty_log_and_sm,
    get_membership_from_log_le_sm_last_applied,
    get_membership_from_log_gt_sm_last_applied_1,
    get_membership_from_log_gt_sm_last_applied_2,
    get_initial_state_without_init,
    get_initial_state_membership_from_log_and_sm,
    get_initial_state_with_state,
    get_initial_state_last_log_gt_sm,
    get_initial_state_last_log_lt_sm,
    get_initial_state_log_ids,
    get_initial_state_re_apply_committed,
    save_vote,
    get_log_entries,
    limited_get_log_entries,
    try_get_log_entry,
    initial_logs,
    get_log_state,
    get_log_id,
    last_id_in_log,
    last_applied_state,
    purge_logs_upto_0,
    purge_logs_upto_5,
    purge_logs_upto_20,
    delete_logs_since_11,
    delete_logs_since_0,
    append_to_log,
    snapshot_meta,
    apply_single,
    apply_multiple,
);

/// The suite's snapshot transfer test, which builds two node's stores.
#[test]
fn transfer_snapshot() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(PairSuite::transfer_snapshot(&FreshFiles))
        .unwrap();
}
