//! The caches a kind's controller fills that the process's other controllers read: its parents
//! and its members' ValkeyNodes. The backup controller reads the sources and members of the
//! kinds it backs up here rather than watching them again: a second watch kept a second copy of
//! every ValkeyNode and parent in memory, and cost a second stream of every change.

use kube::core::DeserializeGuard;
use kube::runtime::reflector::Store;
use valkey_api::v1alpha1::ValkeyNode;

/// The stores of one parent kind `K`, filled while its controller runs.
#[derive(Clone)]
pub struct KindCaches<K: kube::Resource<DynamicType = ()> + Clone + 'static> {
    /// Every object of the kind, as its controller reads them (a spec that does not deserialize
    /// is the guard's error).
    pub parents: Store<DeserializeGuard<K>>,
    /// The ValkeyNodes of the kind's members (by the kind's label).
    pub nodes: Store<ValkeyNode>,
}
