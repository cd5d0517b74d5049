package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"

	"github.com/llmesh/llmesh/route"
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

// problems collects what is wrong with a file, each naming its field.
type problems []error

// bad records that field is wrong: "field: " and the formatted reason.
func (p *problems) bad(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
}

func (p *problems) add(err error) { *p = append(*p, err) }

// err joins the problems, or is nil when there are none.
func (p *problems) err() error { return errors.Join(*p...) }

func (p *problems) hostPort(field, v string) {
	if v == "" {
		return
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		p.bad(field, "%q is not a host:port address", v)
	}
}

func (p *problems) url(field, v string) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.bad(field, "%q is not an absolute http(s) URL", v)
		return
	}
	if u.User != nil {
		p.bad(field, "credentials belong in api_key_env, not in the URL")
	}
}

func (p *problems) envName(field, v string) {
	if v != "" && !envNamePattern.MatchString(v) {
		p.bad(field, "%q is not an environment variable name", v)
	}
}

// secret reads the environment variable that field names into a secret;
// it reports the variable empty or unset.
func (p *problems) secret(field, name string, getenv func(string) string) route.Secret {
	v := route.Secret(getenv(name))
	if v == "" {
		p.bad(field, "environment variable %s is empty or unset", name)
	}
	return v
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
