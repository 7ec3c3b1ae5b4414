//! The cluster-controller's component tests, in one binary: the engine's rules from captured
//! replies, and the engine, the access stage and the migration machines against real
//! valkey-server processes (from the localkube image table), without Kubernetes. Each module is
//! one area; tests that start servers bind addresses of their own (`127.0.<subnet>.x`), so they
//! run side by side.

#[path = "../common/mod.rs"]
mod common;

mod access_rights;
mod atomic_migration;
mod backup_plan;
mod engine_at_rest;
mod engine_decide;
mod engine_decide_safety;
mod engine_faults;
mod engine_form;
mod engine_heal;
mod engine_replicas;
mod engine_restore;
mod engine_resume;
mod engine_rolling;
mod engine_scale;
mod engine_watch;
mod garbage;
mod legacy_migration;
mod parse_fixtures;
mod replication_engine;
mod replication_sentinel;
