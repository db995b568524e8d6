package main

import (
	"errors"
	"testing"
)

func TestCheckLoopback(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080/x", true},
		{"http://127.3.4.5/", true},
		{"http://localhost:9090/metrics", true},
		{"http://LOCALHOST/", true},
		{"http://[::1]:8080/", true},
		{"https://127.0.0.1:8443/", true},
		{"http://[::ffff:127.0.0.1]:80/", true},
		{"http://10.0.0.1/", false},
		{"http://192.168.1.10:8080/", false},
		{"http://172.16.0.1/", false},
		{"http://8.8.8.8/", false},
		{"http://0.0.0.0:8080/", false},
		{"http://example.com/", false},
		{"http://localhost.example.com/", false},
		{"http://127.0.0.1.nip.io/", false},
		{"http://[::2]/", false},
		{"ftp://127.0.0.1/", false},
		{"/relative", false},
		{"http://", false},
	} {
		err := CheckLoopback(tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", tt.url, err, tt.ok)
		}
	}
	if err := CheckLoopback("http://10.1.2.3/"); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("err = %v, want ErrNotLoopback", err)
	}
}

func TestDialerRefusesResolvedNonLoopbackAddresses(t *testing.T) {
	if err := dialControl("tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("loopback: %v", err)
	}
	if err := dialControl("tcp6", "[::1]:80", nil); err != nil {
		t.Errorf("::1: %v", err)
	}
	if err := dialControl("tcp", "93.184.216.34:80", nil); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("public address: err = %v, want ErrNotLoopback", err)
	}
}
