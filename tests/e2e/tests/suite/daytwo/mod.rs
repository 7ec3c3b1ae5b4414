//! Day-2 operations (issue 16): what a platform team runs into in its first weeks. One file per
//! area; the tests of a ValkeyNode alone use [`e2e::node::NodeFixture`].

mod live_config;
mod memory;
mod metrics;
mod progress;
mod quick_start;
mod readiness;
mod scaling;
mod spread;
mod upgrade;
mod volumes;
