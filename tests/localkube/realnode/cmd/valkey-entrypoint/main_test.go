package main

import (
	"reflect"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"valkey-server"}, []string{"valkey-server"}},
		{[]string{"--port", "7000"}, []string{"valkey-server", "--port", "7000"}},
		{[]string{"/etc/valkey/valkey.conf"}, []string{"valkey-server", "/etc/valkey/valkey.conf"}},
		{[]string{"valkey-cli", "ping"}, []string{"valkey-cli", "ping"}},
	} {
		if got := command(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("command(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
