package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storecfg"
)

// runDoctor is the preflight a person runs on the target machine: one line per requirement of
// `steward serve`, ok or missing with what to do, and a non-zero exit if index.mutate would be
// refused. The isolation lines are isolation.Probe's checks, the very code the sidecar's
// preflight runs (and reports in hello's isolation.checks); with the same flags as serve, the
// verdict is the sidecar's. Probe leaves the cgroup tree as it found it (its "cgroups restored"
// line), so the doctor can run in the cgroup the database starts in next (ExecStartPre).
func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var iso isolation.Config
	isolationFlags(fs, &iso)
	stateDir := fs.String("state-dir", os.Getenv("STEWARD_STATE_DIR"), "as steward serve: the durable state directory (default as serve)")
	store := fs.String("store", "", "also check this store: reachability and conditional writes (s3://bucket[/prefix], file:///dir or a directory), with the sidecar's own keys")
	own := credentialFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	iso.WorkerPath, iso.WorkerArgs = "/proc/self/exe", []string{"worker"}
	r := isolation.Probe(iso)
	checks := r.Checks
	checks = append(checks, stateDirCheck(*stateDir))
	cc, creds := credentialsCheck(own)
	checks = append(checks, cc)
	if *store != "" {
		checks = append(checks, storeChecks(ctx, *store, creds, own.allow)...)
	}
	fmt.Fprintf(stdout, "steward doctor: uid %d, --cgroup-parent %s, parent %s\n", os.Geteuid(), iso.Parent, r.Parent.Source)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	missing := 0
	for _, c := range checks {
		status := "ok"
		switch {
		case !c.OK && c.Optional:
			status = "warn"
		case !c.OK:
			status = "MISSING"
			missing++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", status, c.Name, oneLine(c.Detail))
		if !c.OK && c.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", oneLine(c.Fix))
		}
	}
	_ = tw.Flush()
	if missing > 0 {
		fmt.Fprintf(stdout, "verdict: index.mutate would be refused (%d requirement(s) missing)\n", missing)
		return 1
	}
	fmt.Fprintf(stdout, "verdict: ready (isolation %s)\n", r.Mode)
	return 0
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

// stateDirCheck: the sidecar refuses to start without a writable state directory (its ledger).
func stateDirCheck(dir string) isolation.Check {
	if dir == "" {
		dir = sidecar.DefaultStateDir()
	}
	c := isolation.Check{Name: "state dir", Fix: fmt.Sprintf("create %s writable by uid %d, or pass --state-dir (systemd: StateDirectory=steward)", dir, os.Geteuid())}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.Detail = err.Error()
		return c
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	f.Close()
	os.Remove(f.Name())
	c.OK, c.Detail = true, dir+" is writable"
	return c
}

// credentialsCheck loads the sidecar's own keys as serve would: never from the environment, from
// the file (its owner and mode checked) or the descriptor, with a well-formed allow-list.
func credentialsCheck(own *ownCredentials) (isolation.Check, *rpc.Credentials) {
	c := isolation.Check{Name: "own credentials",
		Fix: "put the keys in a file owned by the sidecar's uid, mode 0400 (--s3-credentials-file; systemd: LoadCredential=), and name the stores they go to (--allow-store)"}
	if err := refuseEnvKeys(); err != nil {
		c.Detail = err.Error() + "; steward serve refuses to start"
		return c, nil
	}
	creds, source, err := own.load()
	if err != nil {
		c.Detail = err.Error()
		return c, nil
	}
	if _, err := sidecar.ParseAllowStores(own.allow); err != nil {
		c.Detail = err.Error()
		return c, nil
	}
	switch {
	case creds != nil && len(own.allow) == 0:
		c.Detail = "keys given (" + source + ") but no --allow-store: steward serve refuses to start"
		return c, nil
	case creds == nil:
		c.OK, c.Detail = true, "none: every call on an s3 store must bring its own credentials"
		if len(own.allow) > 0 {
			c.Detail = fmt.Sprintf("none; anonymous access to %v for calls without credentials", own.allow)
		}
	default:
		c.OK, c.Detail = true, fmt.Sprintf("from %s, sent only to %v", source, own.allow)
	}
	return c, creds
}

// storeChecks opens the store as the sidecar would (its own keys, when the store is on the
// allow-list) and probes conditional writes, the ground every commit and fence stands on.
func storeChecks(ctx context.Context, arg string, own *rpc.Credentials, allow []string) []isolation.Check {
	reach := isolation.Check{Name: "store reachable", Detail: arg}
	cond := isolation.Check{Name: "conditional writes", Detail: "not probed: the store is not reachable"}
	spec, err := storeSpec(arg)
	if err != nil {
		reach.Detail, reach.Fix = err.Error(), "give s3://bucket[/prefix] (with STEWARD_S3_ENDPOINT) or file:///dir"
		return []isolation.Check{reach, cond}
	}
	creds, err := sidecar.OwnCredentialsFor(spec, own, allow)
	if err != nil {
		reach.Detail, reach.Fix = err.Error(), "add the store to --allow-store (calls without credentials use the sidecar's own keys only there)"
		return []isolation.Check{reach, cond}
	}
	cfg, err := storecfg.FromSpec(spec, creds)
	if err == nil {
		cfg.MaxRetries, cfg.RequestTimeout = 2, 5*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var st storage.Store
	if err == nil {
		st, err = storage.OpenStore(ctx, cfg)
	}
	if err != nil {
		reach.Detail = err.Error()
		reach.Fix = "check STEWARD_S3_ENDPOINT, the keys of --s3-credentials-file, the bucket and the network"
		return []isolation.Check{reach, cond}
	}
	// The spec names the store without credentials (cfg.String would show the access key).
	reach.OK, reach.Detail = true, strings.TrimSpace(spec.URL+" "+spec.Endpoint)
	err = storage.ProbeConditionalWrites(ctx, st)
	switch {
	case err == nil:
		cond.OK, cond.Detail = true, "a second put-if-absent (If-None-Match: *) of a probe key was refused"
	case errors.Is(err, storage.ErrConditionalWritesIgnored):
		cond.Detail = err.Error()
		cond.Fix = "this store ignores If-None-Match: *, so commits and fences cannot be trusted on it (lance#6595): use a store that honours it (AWS S3, MinIO, ...)"
	default:
		cond.Detail = "probe failed: " + err.Error()
		cond.Fix = "the probe writes and deletes one object under " + filepath.Clean(storage.ProbeKeyPrefix) + "/: grant put and delete there"
	}
	return []isolation.Check{reach, cond}
}
