package pki

import (
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes an admin kubeconfig with the CA and the client certificate embedded, so
// the file alone is enough for any client (kubectl, helm, kube-rs).
func WriteKubeconfig(path, pkiDir, server, cluster, user string) error {
	ca, err := os.ReadFile(filepath.Join(pkiDir, CACert))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(filepath.Join(pkiDir, AdminCert))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(filepath.Join(pkiDir, AdminKey))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = cluster
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
