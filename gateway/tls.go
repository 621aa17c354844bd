package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// certCheckInterval is how often the certificate's files are looked at.
const certCheckInterval = 5 * time.Second

// certReloader serves the certificate of a cert and key file pair, and
// loads them again when either file changes (or on reload). A pair that
// fails to load leaves the last good certificate in use; it is logged and
// counted.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	reloads           *prometheus.CounterVec

	cur  atomic.Pointer[tls.Certificate]
	seen [2]fileStamp // of the pair last tried
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// newCertReloader loads the pair once: an error here stops the command.
func newCertReloader(certFile, keyFile string, log *slog.Logger, reg prometheus.Registerer) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_tls_reloads_total",
			Help: "Loads of the TLS certificate and key files after a change, by outcome: ok (the new certificate is served), error (the last good one stays).",
		}, []string{"outcome"})}
	if reg != nil {
		reg.MustRegister(c.reloads)
	}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// load reads the pair and serves it.
func (c *certReloader) load() error {
	s1, err1 := stamp(c.certFile)
	s2, err2 := stamp(c.keyFile)
	if err1 == nil && err2 == nil {
		c.seen = [2]fileStamp{s1, s2}
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("certificate %s, key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cur.Store(&cert)
	return nil
}

// check loads the pair again when either file changed, or always when
// force is set.
func (c *certReloader) check(force bool) {
	s1, err1 := stamp(c.certFile)
	s2, err2 := stamp(c.keyFile)
	if !force && err1 == nil && err2 == nil && [2]fileStamp{s1, s2} == c.seen {
		return
	}
	if !force && (err1 != nil || err2 != nil) && c.seen == ([2]fileStamp{}) {
		return // missing, and reported already
	}
	if err := c.load(); err != nil {
		if err1 != nil || err2 != nil {
			c.seen = [2]fileStamp{}
		}
		c.log.Error("TLS certificate not reloaded: the last good one stays", "error", err)
		c.reloads.WithLabelValues("error").Inc()
		return
	}
	c.log.Info("TLS certificate reloaded", "cert", c.certFile)
	c.reloads.WithLabelValues("ok").Inc()
}

// run looks at the files every interval, and on reload, until ctx ends.
func (c *certReloader) run(ctx context.Context, every time.Duration, reload <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.check(false)
		case <-reload:
			c.check(true)
		}
	}
}

func (c *certReloader) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cur.Load(), nil
		},
	}
}
