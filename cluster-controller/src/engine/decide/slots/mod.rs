//! Slots: finishing migrations that are open, giving unowned slots an owner, and moving slots
//! so the wanted shards hold them evenly (draining the shards that leave). One module a group of
//! rules, in the order `decide_on` tries them:
//!
//! - [`in_flight`]: migrations already under way, finished, rolled back or waited for;
//! - [`coverage`](mod@coverage): every slot has exactly one owner (at formation, slots first);
//! - [`balance`]: the moves of the rebalance plan, and new jobs beside running ones;
//!
//! and [`ends`], what the first and the last ask of a move's two ends, and [`plan`], the one
//! rebalance plan of a look and the conflict every slot rule reports. Each module says why its
//! rules stand where they do.

mod balance;
mod coverage;
mod ends;
mod in_flight;
mod plan;

pub use balance::ATOMIC_MAX_ATTEMPTS;
pub(super) use balance::{rebalance, slots_to_move, start_beside_running_jobs};
pub(super) use coverage::{coverage, slots_first_at_formation};
pub(super) use in_flight::open_migrations;
pub(super) use plan::shard_conflict;
