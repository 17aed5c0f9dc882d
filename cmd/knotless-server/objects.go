package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/server"
)

// objectStoreOptions are the flags naming the bucket ended runs' logs and
// outputs move to (server.UseObjectStore); empty URL: none, all stays in
// DATA.
type objectStoreOptions struct {
	url, region string
}

// objectStoreFlags adds the object store's flags to f and returns their
// names (each also read from KNOTLESS_<NAME>).
func objectStoreFlags(f *pflag.FlagSet, o *objectStoreOptions) []string {
	f.StringVar(&o.url, "object-store", "",
		"move each ended run's step logs, line times and outputs from DATA into the S3-compatible bucket at `URL` "+
			"("+objstore.URLForms+") and serve them from there; credentials, in this order: "+objstore.CredentialSources+
			"; give every replica the same; default none: everything stays in DATA. Git repositories and live logs always stay in DATA (docs/storage.md)")
	f.StringVar(&o.region, "object-store-region", "",
		"region of the --object-store bucket, for s3:// (Amazon S3); another store says its own (default us-east-1)")
	return []string{"object-store", "object-store-region"}
}

// config is the objstore.Config of o.
func (o objectStoreOptions) config() objstore.Config {
	return objstore.Config{URL: o.url, Region: o.region}
}

// check refuses a URL objstore cannot use (a usage error naming the flag);
// it makes no request.
func (o objectStoreOptions) check() error {
	if o.url == "" {
		if o.region != "" {
			return usagef("--object-store-region %q without --object-store: name the bucket too", o.region)
		}
		return nil
	}
	if _, err := objstore.Open(o.config()); err != nil {
		return usagef("--object-store: %v", err)
	}
	return nil
}

// startObjects gives srv the bucket of o, when there is one, and returns
// the function that stops its mover. A bucket that does not answer at
// start is said in one line, not an error: runs' bytes stay in DATA until
// it does.
func startObjects(ctx context.Context, srv *server.Server, o objectStoreOptions, log *slog.Logger) (stop func(), err error) {
	if o.url == "" {
		return func() {}, nil
	}
	b, err := objstore.Open(o.config())
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Check(cctx); err != nil {
		log.Warn("the object store cannot be used now; ended runs' logs and outputs stay in the data directory until it can", "err", err)
	} else {
		log.Info("ended runs' logs and outputs move to the object store", "store", b.String())
	}
	return srv.UseObjectStore(server.ObjectStore{Bucket: b})
}
