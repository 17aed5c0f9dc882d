// Command deploy builds what deploy/kubernetes/ installs and what a
// release holds (see package internal/deploy). Run from the module root:
//
//	go run ./scripts/deploy release [-o dist]    # make release: every program for linux/amd64 and arm64, SHA256SUMS, the one-file manifest
//	go run ./scripts/deploy digests              # make deploy-digests: build, write the digests into the manifest
//	go run ./scripts/deploy digests -check       # exit 1 when the manifest's digests are stale
//	go run ./scripts/deploy image -o bin/knotless-runner-image.tar [-ref localhost/knotless/runner:dev]
//	go run ./scripts/deploy image -base -o FILE -ref localhost/knotless/runner-base:1
//	go run ./scripts/deploy builder-image -bin DIR -o bin/knotless-builder-image.tar   # make builder-image
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"

	"knotless.dev/knotless/internal/deploy"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
}

const usage = "usage: deploy release [-o DIR] | deploy digests [-check] | deploy image -o FILE [-ref REF] [-base] | deploy builder-image -bin DIR -o FILE"

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", usage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := deploy.ModuleRoot(wd)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	switch args[0] {
	case "release":
		return runRelease(ctx, root, fs, args[1:])
	case "digests":
		return runDigests(ctx, root, fs, args[1:])
	case "builder-image":
		return runBuilderImage(ctx, root, fs, args[1:])
	case "image":
		return runImage(ctx, root, fs, args[1:])
	}
	return fmt.Errorf("unknown command %q: %s", args[0], usage)
}

// runRelease writes a release of this checkout into -o DIR (deploy.MakeRelease) and prints its checksums; args are its flags.
func runRelease(ctx context.Context, root string, fs *flag.FlagSet, args []string) error {
	out := fs.String("o", "dist", "directory to write the release into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rel, err := deploy.MakeRelease(ctx, root, *out, nil)
	if err != nil {
		return err
	}
	fmt.Printf("knotless %s (%s) in %s:\n", rel.Version, rel.GoVersion, rel.Dir)
	sums, err := os.ReadFile(filepath.Join(rel.Dir, deploy.SumsFile))
	if err != nil {
		return err
	}
	os.Stdout.Write(sums)
	if rel.Stale != "" {
		fmt.Fprintf(os.Stderr, "deploy: note: %s holds other digests than this build (`kubectl apply -k` of the checkout would refuse these files; %s holds the right ones): run `make deploy-digests`\n%s\n",
			deploy.Manifest, filepath.Base(rel.Manifest), rel.Stale)
	}
	return nil
}

// runDigests writes the runner's digests for this code into the manifest (deploy.WriteDigests), or with -check only compares; args are its flags.
func runDigests(ctx context.Context, root string, fs *flag.FlagSet, args []string) error {
	check := fs.Bool("check", false, "only compare: exit 1 when the manifest's digests differ from the build's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	digests, err := buildDigests(ctx, root)
	if err != nil {
		return err
	}
	manifest := filepath.Join(root, deploy.Manifest)
	if *check {
		text, err := os.ReadFile(manifest)
		if err != nil {
			return err
		}
		if s := deploy.Stale(text, digests); s != "" {
			return fmt.Errorf("%s: stale digests (run `make deploy-digests`):\n%s", deploy.Manifest, s)
		}
		fmt.Println(deploy.Manifest + ": digests match the build")
		return nil
	}
	changed, err := deploy.WriteDigests(manifest, digests)
	if err != nil {
		return err
	}
	for _, name := range sorted(digests) {
		fmt.Printf("%s  %s\n", digests[name], name)
	}
	if changed {
		fmt.Println("wrote", deploy.Manifest)
	} else {
		fmt.Println(deploy.Manifest, "already up to date")
	}
	return nil
}

// runBuilderImage writes the builder image archive from the binaries in -bin DIR (deploy.LocalBuilderImage); args are its flags.
func runBuilderImage(ctx context.Context, root string, fs *flag.FlagSet, args []string) error {
	bin := fs.String("bin", "", "directory holding buildkitd, buildctl and runc, static, for this machine (make builder-image builds them)")
	out := fs.String("o", "", "image archive to write (docker format: docker load, ctr images import)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *out == "" {
		return fmt.Errorf("builder-image needs -bin DIR and -o FILE")
	}
	tmp, err := os.MkdirTemp("", "knotless-deploy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ref, archive, err := deploy.LocalBuilderImage(ctx, root, tmp, *bin, runtime.GOARCH, func(string) bool { return false })
	if err != nil {
		return err
	}
	if err := os.Rename(archive, *out); err != nil {
		return err
	}
	fmt.Printf("%s in %s (linux/%s): load it (docker load -i %s, or ctr -n k8s.io images import %s), or push it where your nodes pull from, and give the runner --builder-image with its name\n",
		ref, *out, runtime.GOARCH, *out, *out)
	return nil
}

// runImage writes the runner image archive (or with -base the base image) to -o FILE; args are its flags.
func runImage(ctx context.Context, root string, fs *flag.FlagSet, args []string) error {
	out := fs.String("o", "", "image archive to write (docker format: docker load, ctr images import)")
	ref := fs.String("ref", "localhost/knotless/runner:dev", "image name and tag (never :latest)")
	base := fs.Bool("base", false, "without knotless-run and knotless-agent: the small image the manifests' init container installs them into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("image needs -o FILE")
	}
	var img deploy.Image
	if *base {
		files, err := deploy.BaseFiles()
		if err != nil {
			return err
		}
		uid := fmt.Sprint(deploy.RunnerUID)
		img = deploy.Image{Ref: *ref, Files: files, User: uid + ":" + uid, Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}}
	} else {
		tmp, err := os.MkdirTemp("", "knotless-deploy-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		// This machine's knotless-run, both agents.
		files, err := deploy.BuildAll(ctx, root, tmp, "knotless-agent")
		if err != nil {
			return err
		}
		run, err := deploy.Build(ctx, root, tmp, runtime.GOARCH, "knotless-run")
		if err != nil {
			return err
		}
		for n, p := range run {
			files[n] = p
		}
		if img, err = deploy.RunnerImage(*ref, runtime.GOARCH, files); err != nil {
			return err
		}
	}
	if err := deploy.WriteArchive(*out, img); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s)\n", *out, *ref)
	return nil
}

// buildDigests builds the files the manifest names (deploy.ManifestFiles)
// into a temporary directory and returns their digests by file name.
func buildDigests(ctx context.Context, root string) (map[string]string, error) {
	tmp, err := os.MkdirTemp("", "knotless-deploy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	files, err := deploy.BuildAll(ctx, root, tmp, deploy.Programs...)
	if err != nil {
		return nil, err
	}
	return deploy.FileDigests(files)
}

func sorted(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
