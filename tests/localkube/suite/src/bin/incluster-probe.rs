//! Runs inside a test pod with only its mounted ServiceAccount token: lists ConfigMaps (which
//! its Role allows) and Secrets (which it does not). Exit 0 when the first works and the second
//! is refused with 403; every result goes to stdout.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let config = match kube::Config::incluster() {
        Ok(c) => c,
        Err(e) => {
            println!("in-cluster config: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let namespace = config.default_namespace.clone();
    println!("api={} namespace={namespace}", config.cluster_url);
    let client = match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => {
            println!("client: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .list(&Default::default())
        .await;
    let config_maps_ok = match &config_maps {
        Ok(list) => {
            println!("configmaps: allowed ({} items)", list.items.len());
            true
        }
        Err(e) => {
            println!("configmaps: {e}");
            false
        }
    };
    let secrets = Api::<Secret>::namespaced(client, &namespace)
        .list(&Default::default())
        .await;
    let secrets_refused = match &secrets {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            println!("secrets: forbidden (403): {}", status.message);
            true
        }
        Err(e) => {
            println!("secrets: unexpected error: {e}");
            false
        }
        Ok(list) => {
            println!("secrets: unexpectedly allowed ({} items)", list.items.len());
            false
        }
    };
    if config_maps_ok && secrets_refused {
        println!("result: ok");
        std::process::ExitCode::SUCCESS
    } else {
        println!("result: failed");
        std::process::ExitCode::FAILURE
    }
}
