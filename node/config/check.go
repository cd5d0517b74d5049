package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
)

// ValidName reports whether name may name a node, a provider, a tenant or
// a group: 1-64 letters, digits, '.', '_' or '-', starting and ending with
// a letter or digit.
func ValidName(name string) bool { return nodeNamePattern.MatchString(name) }

var (
	nodeNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$`)
	envNamePattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	sha256Pattern   = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

func checkHostPort(field, v string, problems *[]error) {
	if v == "" {
		return
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		*problems = append(*problems, fmt.Errorf("%s: %q is not a host:port address", field, v))
	}
}

func checkURL(field, v string, problems *[]error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		*problems = append(*problems, fmt.Errorf("%s: %q is not an absolute http(s) URL", field, v))
		return
	}
	if u.User != nil {
		*problems = append(*problems, fmt.Errorf("%s: credentials belong in api_key_env, not in the URL", field))
	}
}

func checkEnvName(field, v string, problems *[]error) {
	if v != "" && !envNamePattern.MatchString(v) {
		*problems = append(*problems, fmt.Errorf("%s: %q is not an environment variable name", field, v))
	}
}

// loopbackAddr reports whether a host:port binds to loopback only.
func loopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return true // reported by the address check
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PrivateIP is the address node.advertise "auto" stands for: the first
// private IPv4 address of an interface that is up (a container's or a
// pod's own), else the first IPv4 address that is not loopback.
func PrivateIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	var fallback string
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			if ipn.IP.IsPrivate() {
				return ipn.IP.String(), nil
			}
			if fallback == "" {
				fallback = ipn.IP.String()
			}
		}
	}
	if fallback == "" {
		return "", errors.New("no interface has an IPv4 address other than loopback")
	}
	return fallback, nil
}
