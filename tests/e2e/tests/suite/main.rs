//! The end-to-end suite: one test binary, so that every test runs in one pool (light tests on
//! many threads, heavy ones throttled by `e2e::pool::heavy`) and one failing test hides none
//! of the others. Each module is one area of the product; each test works in its own namespace.

mod api;
mod at_rest;
mod backup;
mod bench_tiny;
mod chart;
mod cluster;
mod daytwo;
mod external;
mod faults;
mod node_controller;
mod realnode;
mod replication;
mod security;
mod sentinel;
mod tls;
