package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
)

// ownCredentials are the flags that give a sidecar its own S3 keys and the stores they may be
// sent to, shared by serve and doctor so that doctor checks what serve would load.
type ownCredentials struct {
	file  string
	fd    int
	allow []string
}

func credentialFlags(fs *flag.FlagSet) *ownCredentials {
	c := &ownCredentials{}
	fs.StringVar(&c.file, "s3-credentials-file", "", "read the sidecar's own S3 keys from this file (lines access_key = … and secret_key = …; owned by the sidecar's uid, mode 0400 or 0600); systemd: LoadCredential= and ${CREDENTIALS_DIRECTORY}/NAME")
	fs.IntVar(&c.fd, "s3-credentials-fd", -1, "read the sidecar's own S3 keys (the file's format) once from this inherited descriptor, then close it")
	fs.Func("allow-store", "an s3 store the sidecar's own keys may be sent to, by canonical name: s3://bucket[/prefix]@host:port[;secure][;region=R] (repeatable; a store below the prefix is allowed too)", func(v string) error {
		c.allow = append(c.allow, v)
		return nil
	})
	return c
}

// errEnvCredentials: keys in the environment of a long-running sidecar.
var errEnvCredentials = errors.New("the sidecar's own S3 keys are never read from its environment")

// envKeys lists the S3 key variables set in this process's environment.
func envKeys() []string {
	var set []string
	for _, k := range []string{envS3AccessKey, envS3SecretKey} {
		if os.Getenv(k) != "" {
			set = append(set, k)
		}
	}
	return set
}

// refuseEnvKeys fails when a key variable is set: a process's initial environment stays
// readable in /proc/<pid>/environ for its whole life (unsetting it later changes nothing there),
// so the sidecar refuses to run with one rather than pretend to scrub it.
func refuseEnvKeys() error {
	if set := envKeys(); len(set) > 0 {
		return fmt.Errorf("%w: %v set; pass --s3-credentials-file or --s3-credentials-fd instead and start the sidecar without them", errEnvCredentials, set)
	}
	return nil
}

// load reads the keys from the file or the descriptor (at most one may be given); nil and
// sidecar.CredentialsNone without either.
func (c *ownCredentials) load() (*rpc.Credentials, string, error) {
	switch {
	case c.file != "" && c.fd >= 0:
		return nil, "", fmt.Errorf("%w: give --s3-credentials-file or --s3-credentials-fd, not both", errUsage)
	case c.file != "":
		cr, err := sidecar.LoadCredentialsFile(c.file)
		if err != nil {
			return nil, "", err
		}
		return &cr, sidecar.CredentialsFile, nil
	case c.fd >= 0:
		cr, err := sidecar.LoadCredentialsFD(c.fd)
		if err != nil {
			return nil, "", err
		}
		return &cr, sidecar.CredentialsFD, nil
	}
	return nil, sidecar.CredentialsNone, nil
}
