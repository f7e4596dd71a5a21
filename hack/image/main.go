// Command image builds the bulkd container image without a container
// daemon, the way ko does: a small base layer made here (users, groups,
// /tmp, CA certificates, nsswitch.conf) plus a layer holding the static
// bulkd binary, assembled with go-containerregistry.
//
// It writes one tar file that is both an OCI image layout archive
// (oci-layout, index.json, blobs/sha256/...) and a `docker save` archive
// (manifest.json with RepoTags), so every common loader takes it:
//
//	docker load -i bin/bulkd-image.tar
//	podman load -i bin/bulkd-image.tar
//	kind load image-archive bin/bulkd-image.tar
//	ctr -n k8s.io images import bin/bulkd-image.tar
//	skopeo copy oci-archive:bin/bulkd-image.tar ...
//
// and, when --layout is given, the same image as an OCI layout directory.
//
// Usage (make image runs it):
//
//	go run ./hack/image --binary bin/bulkd --version v1.2.3 --commit abc1234 \
//	    --tag 0.1.0 --tag v1.2.3 --tag latest --tar bin/bulkd-image.tar --layout bin/bulkd-oci
//
// `image rootfs DIR` writes only the base files into DIR (the Dockerfile uses
// it so both images have the same base).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "rootfs" {
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: image rootfs DIR")
			os.Exit(2)
		}
		if err := WriteRootFS(os.Args[2], DefaultCACerts); err != nil {
			fmt.Fprintln(os.Stderr, "image rootfs:", err)
			os.Exit(1)
		}
		return
	}

	o := Options{}
	var tags stringList
	fs := flag.NewFlagSet("image", flag.ExitOnError)
	fs.StringVar(&o.Binary, "binary", "bin/bulkd", "static linux bulkd binary to put at "+BinaryPath)
	fs.StringVar(&o.Repository, "repository", DefaultRepository, "image repository (name without tag)")
	fs.Var(&tags, "tag", "image tag (repeatable; default: --version and latest)")
	fs.StringVar(&o.Version, "version", "dev", "bulkd version (image label org.opencontainers.image.version)")
	fs.StringVar(&o.Commit, "commit", "unknown", "source commit (label org.opencontainers.image.revision)")
	fs.StringVar(&o.Source, "source", DefaultSource, "source repository URL (label org.opencontainers.image.source)")
	fs.StringVar(&o.Platform, "platform", "linux/"+runtime.GOARCH, "platform of the binary, os/arch")
	fs.StringVar(&o.CACerts, "ca-certs", DefaultCACerts, "CA bundle copied into the image when it exists (empty: none)")
	fs.StringVar(&o.TarPath, "tar", "bin/bulkd-image.tar", "image archive to write (OCI layout + docker save manifest)")
	fs.StringVar(&o.LayoutPath, "layout", "", "also write an OCI image layout directory here (replaced)")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	o.Tags = tags
	if len(o.Tags) == 0 {
		o.Tags = []string{o.Version, "latest"}
	}
	// Reproducible builds: SOURCE_DATE_EPOCH sets every timestamp; without
	// it they are the Unix epoch, as ko does.
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "image: SOURCE_DATE_EPOCH=%q is not an integer\n", v)
			os.Exit(2)
		}
		o.Created = time.Unix(sec, 0).UTC()
	}

	res, err := Build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image %s (%d layers, %s compressed)\n", res.Digest, res.Layers, humanBytes(res.CompressedSize))
	for _, r := range res.References {
		fmt.Printf("  %s\n", r)
	}
	fmt.Printf("archive %s\n", o.TarPath)
	if o.LayoutPath != "" {
		fmt.Printf("layout  %s\n", o.LayoutPath)
	}
	if res.NoCACerts {
		fmt.Fprintf(os.Stderr, "image: warning: %s not found; the image has no CA certificates (TLS to Redis or websites will fail)\n", o.CACerts)
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
