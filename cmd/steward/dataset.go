package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storecfg"
)

// Environment variables supplying S3 settings for --store s3://bucket/prefix. Credentials
// come only from the environment, never from flags (which show up in ps output).
const (
	envS3Endpoint  = "STEWARD_S3_ENDPOINT"
	envS3AccessKey = "STEWARD_S3_ACCESS_KEY"
	envS3SecretKey = "STEWARD_S3_SECRET_KEY"
	envS3Secure    = "STEWARD_S3_SECURE" // "1" or "true" for https
)

const datasetUsage = `usage:
  steward dataset create   --store DIR|file:///dir|s3://bucket/prefix --path P (--rows N [--seed S] | --csv FILE) [--fragment-rows N]
  steward dataset describe --store STORE --path P [--version V]
  steward dataset versions --store STORE --path P

  --format lance (each command): a real Lance dataset, made and read by Lance's own library through
  engines/lance/lancectl.py (the Lance engine's venv: scripts/lance.sh install; found through
  STEWARD_LANCE_PYTHON and STEWARD_LANCE_DIR, else .tools/lance and engines/lance under the working
  directory). create takes --rows N [--seed S] [--dim D] (columns id, price, category, labels, text
  and a D-dimensional float32 vector vec, D default 128, 0 for none); the answers are JSON.

  A file:// store needs no permission for the contained workers: they reach it only through the
  sidecar's gateway, which reads and writes it as the sidecar's own user.

S3 stores read %s, %s, %s (and %s=1 for https).
`

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

// runDataset implements "steward dataset ...". It returns the process exit status: 0 on
// success, 1 on failure, 2 on a usage error.
func runDataset(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, datasetUsage, envS3Endpoint, envS3AccessKey, envS3SecretKey, envS3Secure)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var err error
	switch args[0] {
	case "create":
		err = datasetCreate(ctx, args[1:], stdout)
	case "describe":
		err = datasetDescribe(ctx, args[1:], stdout)
	case "versions":
		err = datasetVersions(ctx, args[1:], stdout)
	default:
		err = fmt.Errorf("%w: unknown dataset command %q", errUsage, args[0])
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stderr, "steward dataset: %v\n", err)
		fmt.Fprintf(stderr, datasetUsage, envS3Endpoint, envS3AccessKey, envS3SecretKey, envS3Secure)
		return 2
	default:
		fmt.Fprintf(stderr, "steward dataset %s: %v\n", args[0], err)
		return 1
	}
}

// datasetFlags holds the flags shared by every dataset command.
type datasetFlags struct {
	fs     *flag.FlagSet
	store  string
	path   string
	format string
}

func newDatasetFlags(name string) *datasetFlags {
	f := &datasetFlags{fs: flag.NewFlagSet("dataset "+name, flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.fs.StringVar(&f.store, "store", "", "local directory, file:///dir or s3://bucket/prefix")
	f.fs.StringVar(&f.path, "path", "", "dataset path inside the store")
	f.fs.StringVar(&f.format, "format", "steward", "dataset format: steward (the built-in engine's) or lance")
	return f
}

func (f *datasetFlags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, f.fs.Arg(0))
	}
	if f.store == "" || f.path == "" {
		return fmt.Errorf("%w: --store and --path are required", errUsage)
	}
	if f.format != "steward" && f.format != "lance" {
		return fmt.Errorf("%w: --format %q: want steward or lance", errUsage, f.format)
	}
	return nil
}

// lance runs one lancectl command on the dataset (--format lance), its JSON answer to stdout.
func (f *datasetFlags) lance(ctx context.Context, stdout io.Writer, cmd string, extra ...string) error {
	spec, err := storeSpec(f.store)
	if err != nil {
		return err
	}
	return lancectlOn(ctx, stdout, os.Stderr, spec, f.path, cmd, extra...)
}

func (f *datasetFlags) open(ctx context.Context) (storage.Store, error) {
	spec, err := storeSpec(f.store)
	if err != nil {
		return nil, err
	}
	cfg, err := storecfg.FromSpec(spec, envCredentials())
	if err != nil {
		return nil, err
	}
	return storage.OpenStore(ctx, cfg)
}

func datasetCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newDatasetFlags("create")
	rows := f.fs.Int64("rows", 0, "rows to generate")
	seed := f.fs.Uint64("seed", 1, "generator seed")
	csvPath := f.fs.String("csv", "", "CSV file with a header row to import")
	perFrag := f.fs.Int("fragment-rows", 1<<20, "rows per fragment")
	dim := f.fs.Int("dim", 128, "--format lance: dimension of the vec column (0: none)")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.format == "lance" {
		if *rows <= 0 || *csvPath != "" {
			return fmt.Errorf("%w: --format lance takes --rows N", errUsage)
		}
		return f.lance(ctx, stdout, "create", "--rows", fmt.Sprint(*rows), "--seed", fmt.Sprint(*seed), "--dim", fmt.Sprint(*dim))
	}
	if (*rows > 0) == (*csvPath != "") {
		return fmt.Errorf("%w: give exactly one of --rows N or --csv FILE", errUsage)
	}
	var src dataset.RowSource
	if *csvPath != "" {
		file, err := os.Open(*csvPath)
		if err != nil {
			return err
		}
		defer file.Close()
		if src, err = dataset.NewCSVSource(file); err != nil {
			return err
		}
	} else {
		src = dataset.NewGenerator(*rows, *seed)
	}
	store, err := f.open(ctx)
	if err != nil {
		return err
	}
	d, res, err := dataset.Create(ctx, store, f.path, src, dataset.WriteOptions{RowsPerFragment: *perFrag})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created %s version %d: %d rows in %d fragments\n", f.path, d.Version(), res.Rows, len(res.Created))
	return nil
}

func datasetDescribe(ctx context.Context, args []string, stdout io.Writer) error {
	f := newDatasetFlags("describe")
	version := f.fs.Int64("version", 0, "version to describe (default: latest)")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.format == "lance" {
		if *version != 0 {
			return fmt.Errorf("%w: --format lance describes the latest version only", errUsage)
		}
		return f.lance(ctx, stdout, "describe")
	}
	store, err := f.open(ctx)
	if err != nil {
		return err
	}
	d, err := dataset.Open(ctx, store, f.path, *version)
	if err != nil {
		return err
	}
	m := d.Manifest()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "dataset\t%s\n", f.path)
	fmt.Fprintf(tw, "version\t%d\n", m.Version)
	fmt.Fprintf(tw, "transaction\t%s\n", describeTxn(m.Transaction))
	fmt.Fprintf(tw, "created\t%s\n", m.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
	fmt.Fprintf(tw, "rows\t%d\n", m.Rows())
	fmt.Fprintf(tw, "fragments\t%d\n", len(m.Fragments))
	tw.Flush()

	fmt.Fprintln(stdout, "\nfields:")
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tNAME\tTYPE")
	for _, fl := range m.Schema.Fields {
		fmt.Fprintf(tw, "  %d\t%s\t%s\n", fl.ID, fl.Name, fl.Type)
	}
	tw.Flush()

	fmt.Fprintln(stdout, "\nindices:")
	if len(m.Indices) == 0 {
		fmt.Fprintln(stdout, "  (none)")
		return nil
	}
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tTYPE\tCOLUMN\tROWS\tBUILT AT\tUUID")
	for _, ix := range m.Indices {
		col, _ := m.Schema.FieldByID(ix.FieldIDs[0])
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\tv%d\t%s\n", ix.Name, ix.Type, col.Name, ix.Rows, ix.DatasetVersion, ix.UUID)
	}
	return tw.Flush()
}

func describeTxn(t dataset.Transaction) string {
	s := t.Op
	if t.Index != "" {
		s += " " + t.Index
	}
	if t.InvocationID != "" {
		s += " by " + t.InvocationID
	}
	if t.FencedInvocation != "" {
		s += " fencing " + t.FencedInvocation
	}
	return s
}

func datasetVersions(ctx context.Context, args []string, stdout io.Writer) error {
	f := newDatasetFlags("versions")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.format == "lance" {
		return f.lance(ctx, stdout, "versions")
	}
	store, err := f.open(ctx)
	if err != nil {
		return err
	}
	vs, err := dataset.Versions(ctx, store, f.path)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tOP\tINVOCATION\tROWS\tFRAGMENTS\tINDICES\tCREATED")
	for _, v := range vs {
		inv := v.InvocationID
		if v.Fenced != "" {
			inv = "fence:" + v.Fenced
		}
		if inv == "" {
			inv = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\n", v.Version, v.Op, inv, v.Rows, v.Fragments, v.Indices,
			v.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
	}
	return tw.Flush()
}
