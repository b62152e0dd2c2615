//! The integration tests, one module per file of `tests/`, compiled into one test binary:
//! each test binary is linked (with the release profile's LTO) on its own, and twenty of
//! them took most of CI's time. The two allocation-counting tests stay binaries of their own,
//! since each installs a global allocator. Run one file's tests with
//! `cargo test --release --test integration relayout::`.

mod common;

#[path = "crud_errors.rs"]
mod crud_errors;
#[path = "data_dir.rs"]
mod data_dir;
#[path = "ddl_crash.rs"]
mod ddl_crash;
#[path = "differential.rs"]
mod differential;
#[path = "durability.rs"]
mod durability;
#[path = "durability_disk_full.rs"]
mod durability_disk_full;
#[path = "durability_faults.rs"]
mod durability_faults;
#[path = "durability_model.rs"]
mod durability_model;
#[path = "failover.rs"]
mod failover;
#[path = "fan_out_pipeline.rs"]
mod fan_out_pipeline;
#[path = "fuzz_seeds.rs"]
mod fuzz_seeds;
#[path = "load_generator.rs"]
mod load_generator;
#[path = "metrics.rs"]
mod metrics;
#[path = "moved_key_pipeline.rs"]
mod moved_key_pipeline;
#[path = "promotion.rs"]
mod promotion;
#[path = "python_connector.rs"]
mod python_connector;
#[path = "read_only.rs"]
mod read_only;
#[path = "recovery_damage.rs"]
mod recovery_damage;
#[path = "relayout.rs"]
mod relayout;
#[path = "replication.rs"]
mod replication;
#[path = "schema_changes.rs"]
mod schema_changes;
#[path = "server_batching.rs"]
mod server_batching;
#[path = "server_connections.rs"]
mod server_connections;
#[path = "server_flood.rs"]
mod server_flood;
#[path = "server_listen.rs"]
mod server_listen;
#[path = "server_memory.rs"]
mod server_memory;
#[path = "server_protocol.rs"]
mod server_protocol;
#[path = "server_runs.rs"]
mod server_runs;
#[path = "server_shutdown.rs"]
mod server_shutdown;
#[path = "server_sleeping_cores.rs"]
mod server_sleeping_cores;
#[path = "server_threads.rs"]
mod server_threads;
#[path = "storage_model.rs"]
mod storage_model;
#[path = "sync_replication.rs"]
mod sync_replication;
#[path = "system_views.rs"]
mod system_views;
#[path = "tarantool_replies.rs"]
mod tarantool_replies;
