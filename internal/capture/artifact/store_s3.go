package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// S3Store keeps artifacts in a bucket of an S3-compatible server, under a
// prefix, with the layout Store describes.
//
// Every upload is checked by the server: each request carries the sha256
// of its body (x-amz-content-sha256, covered by the signature), which the
// server recomputes and refuses on a mismatch. Files up to PartSize go in
// one request; larger ones as a multipart upload whose parts are each
// checked that way, and whose whole is checked against the sealed sha256
// here before the upload is completed.
//
// Writes are conditional (If-None-Match: *), so a server that supports
// conditional writes (AWS S3, MinIO) refuses to overwrite a record even
// when two Puts of one id race. A server that ignores the header on PUT
// (s3proxy 2.6 does) is guarded only by Put's read of the record before it
// writes: two Puts of one id with different metadata that both read before
// either writes leave the later record. Ids are made unique per capture by
// the agent that records it, so that takes two agents claiming one id.
type S3Store struct {
	cl        *minio.Client
	core      minio.Core
	transport *http.Transport
	bucket    string
	prefix    string // "" or ending in "/"
	partSize  int64
}

// OpenS3Store reads the credentials (with s3.credentials ambient: finds the
// pod's or the machine's AWS identity and gets its first keys), connects
// to the server and checks that the bucket exists.
func OpenS3Store(ctx context.Context, cfg S3StoreConfig) (*S3Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ambient := cfg.Credentials == S3CredentialsAmbient
	var creds *credentials.Credentials
	if ambient {
		creds = newAmbientCredentials()
	} else {
		access, secret, err := cfg.credentials()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewStaticV4(access, secret, "")
	}
	transport, err := minio.DefaultTransport(!cfg.Insecure)
	if err != nil {
		return nil, fmt.Errorf("capture store: %w", err)
	}
	if cfg.CAFile != "" {
		pool, err := certPool(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	cl, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     creds,
		Secure:    !cfg.Insecure,
		Region:    cfg.Region,
		Transport: transport,
	})
	if err != nil {
		return nil, fmt.Errorf("capture store: s3 %s: %w", cfg.Endpoint, err)
	}
	s := &S3Store{cl: cl, core: minio.Core{Client: cl}, transport: transport, bucket: cfg.Bucket, prefix: cfg.Prefix, partSize: cfg.PartSize}
	if s.prefix != "" && !strings.HasSuffix(s.prefix, "/") {
		s.prefix += "/"
	}
	if s.partSize == 0 {
		s.partSize = DefaultPartSize
	}
	check := "the keys"
	if ambient {
		// Asked here, a missing identity is named as such rather than
		// surfacing from the first request.
		cc := cl.CredContext()
		cc.Context = ctx
		if _, err := creds.GetWithContext(cc); err != nil {
			transport.CloseIdleConnections()
			return nil, err
		}
		check = "that the identity's role may list and write the bucket"
	}
	ok, err := cl.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		transport.CloseIdleConnections()
		return nil, fmt.Errorf("capture store: s3 %s bucket %s: %w (check the endpoint, %s and s3.insecure)", cfg.Endpoint, cfg.Bucket, err, check)
	}
	if !ok {
		return nil, fmt.Errorf("capture store: s3 %s has no bucket %s: create it (the agent never creates buckets)", cfg.Endpoint, cfg.Bucket)
	}
	return s, nil
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("capture store: s3.ca_file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("capture store: s3.ca_file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Close implements Store; the client holds only idle connections.
func (s *S3Store) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

func (s *S3Store) key(rel string) string { return s.prefix + rel }
func (s *S3Store) url(rel string) string { return "s3://" + s.bucket + "/" + s.key(rel) }

// Put implements Store.
func (s *S3Store) Put(ctx context.Context, md *record.Metadata, dir string) (Location, error) {
	if err := md.CheckSealed(); err != nil {
		return Location{}, err
	}
	record, err := record.Encode(md)
	if err != nil {
		return Location{}, err
	}
	existing, err := s.readRecord(ctx, md.ID)
	switch {
	case err == nil:
		if !bytes.Equal(existing, record) {
			return Location{}, fmt.Errorf("capture %s: %w (%s)", md.ID, ErrExists, s.url(recordKey(md.ID)))
		}
	case !isNotFound(err):
		return Location{}, fmt.Errorf("capture %s: read %s: %w", md.ID, s.url(recordKey(md.ID)), err)
	}
	src, err := os.OpenRoot(dir)
	if err != nil {
		return Location{}, fmt.Errorf("capture %s: %w", md.ID, err)
	}
	defer src.Close()
	objects := distinctObjects(md)
	// Check every file before the first upload, so that a bad artifact
	// leaves nothing behind.
	for _, f := range objects {
		if err := checkSealedFile(src, md.ID, f); err != nil {
			return Location{}, err
		}
	}

	loc := Location{Metadata: s.url(recordKey(md.ID))}
	for _, f := range md.Files {
		loc.Files = append(loc.Files, s.url(objectKey(f.SHA256)))
	}
	for _, f := range objects {
		wrote, err := s.putObject(ctx, src, md.ID, f)
		if err != nil {
			return Location{}, err
		}
		if wrote {
			loc.NewObjects++
			loc.NewBytes += f.Bytes
		}
	}
	if err := s.putRecord(ctx, md.ID, record); err != nil {
		return Location{}, err
	}
	return loc, nil
}

// checkSealedFile checks that file f is a regular file of its sealed size.
func checkSealedFile(src *os.Root, id string, f record.File) error {
	in, err := openArtifactFile(src, f.Name)
	if err != nil {
		return fmt.Errorf("capture %s: %w", id, err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("capture %s: %w", id, err)
	}
	if fi.Size() != f.Bytes {
		return fmt.Errorf("%w: capture %s file %s changed after it was sealed: %d bytes, sealed %d", record.ErrInvalid, id, f.Name, fi.Size(), f.Bytes)
	}
	return nil
}

// putObject uploads file f of capture id unless its object exists, and
// reports whether it did. An existing object is trusted by its key and
// size; Open checks the content whenever it is read.
func (s *S3Store) putObject(ctx context.Context, src *os.Root, id string, f record.File) (bool, error) {
	key := s.key(objectKey(f.SHA256))
	info, err := s.cl.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err == nil {
		if info.Size != f.Bytes {
			return false, fmt.Errorf("%w: %s holds %d bytes, want %d; remove it and Put again", record.ErrCorrupt, s.url(objectKey(f.SHA256)), info.Size, f.Bytes)
		}
		return false, nil
	}
	if !isNotFound(err) {
		return false, fmt.Errorf("capture %s: stat %s: %w", id, s.url(objectKey(f.SHA256)), err)
	}
	in, err := openArtifactFile(src, f.Name)
	if err != nil {
		return false, fmt.Errorf("capture %s: %w", id, err)
	}
	defer in.Close()
	if f.Bytes <= s.partSize {
		err = s.putSingle(ctx, key, in, f)
	} else {
		err = s.putMultipart(ctx, key, in, id, f)
	}
	switch {
	case err == nil:
		return true, nil
	case isPreconditionFailed(err):
		return false, nil // another Put stored the same content meanwhile
	case errors.Is(err, record.ErrInvalid):
		return false, err
	case minio.ToErrorResponse(err).Code == "XAmzContentSHA256Mismatch":
		return false, fmt.Errorf("%w: capture %s file %s changed after it was sealed: the server found another sha256 than %s", record.ErrInvalid, id, f.Name, f.SHA256)
	default:
		return false, fmt.Errorf("capture %s: upload %s to %s: %w", id, f.Name, s.url(objectKey(f.SHA256)), err)
	}
}

// putSingle uploads f in one request whose body the server checks against
// the sealed sha256.
func (s *S3Store) putSingle(ctx context.Context, key string, in *os.File, f record.File) error {
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true}
	opts.SetMatchETagExcept("*")
	// DisableContentSha256 stops minio-go from signing the payload in
	// chunks or leaving it unsigned; the hash given here is sent and
	// signed instead.
	_, err := s.core.PutObject(ctx, s.bucket, key, io.NewSectionReader(in, 0, f.Bytes), f.Bytes, "", f.SHA256, opts)
	return err
}

// putMultipart uploads f in parts of partSize, each checked by the server
// against its own sha256, and completes the upload only when the parts
// add up to the sealed sha256. On any error the upload is aborted, so the
// server keeps no parts.
func (s *S3Store) putMultipart(ctx context.Context, key string, in *os.File, id string, f record.File) (err error) {
	uploadID, err := s.core.NewMultipartUpload(ctx, s.bucket, key, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if aerr := s.core.AbortMultipartUpload(actx, s.bucket, key, uploadID); aerr != nil {
				err = fmt.Errorf("%w (and aborting the upload failed: %v)", err, aerr)
			}
		}
	}()
	whole := sha256.New()
	var parts []minio.CompletePart
	for off, num := int64(0), 1; off < f.Bytes; off, num = off+s.partSize, num+1 {
		size := min(s.partSize, f.Bytes-off)
		part := io.NewSectionReader(in, off, size)
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(h, whole), part)
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("%w: capture %s file %s changed after it was sealed: it ends at %d bytes, sealed %d", record.ErrInvalid, id, f.Name, off+n, f.Bytes)
		}
		if _, err := part.Seek(0, io.SeekStart); err != nil {
			return err
		}
		p, err := s.core.PutObjectPart(ctx, s.bucket, key, uploadID, num, part, size, minio.PutObjectPartOptions{
			Sha256Hex:            hex.EncodeToString(h.Sum(nil)),
			DisableContentSha256: true,
		})
		if err != nil {
			return err
		}
		parts = append(parts, minio.CompletePart{PartNumber: num, ETag: p.ETag})
	}
	if sum := hex.EncodeToString(whole.Sum(nil)); sum != f.SHA256 {
		return changedSinceSeal(id, f, f.Bytes, sum)
	}
	opts := minio.PutObjectOptions{}
	opts.SetMatchETagExcept("*")
	_, err = s.core.CompleteMultipartUpload(ctx, s.bucket, key, uploadID, parts, opts)
	return err
}

// putRecord writes the record of capture id unless an identical one is
// there; a different one is ErrExists.
func (s *S3Store) putRecord(ctx context.Context, id string, record []byte) error {
	opts := minio.PutObjectOptions{ContentType: "application/json", DisableContentSha256: true}
	opts.SetMatchETagExcept("*")
	sum := sha256.Sum256(record)
	_, err := s.core.PutObject(ctx, s.bucket, s.key(recordKey(id)), bytes.NewReader(record), int64(len(record)), "", hex.EncodeToString(sum[:]), opts)
	if err == nil {
		return nil
	}
	if !isPreconditionFailed(err) {
		return fmt.Errorf("capture %s: write %s: %w", id, s.url(recordKey(id)), err)
	}
	existing, rerr := s.readRecord(ctx, id)
	if rerr != nil {
		return fmt.Errorf("capture %s: read %s: %w", id, s.url(recordKey(id)), rerr)
	}
	if !bytes.Equal(existing, record) {
		return fmt.Errorf("capture %s: %w (%s)", id, ErrExists, s.url(recordKey(id)))
	}
	return nil
}

// readRecord returns the stored bytes of capture id's record, at most
// MaxMetadataBytes+1 of them; a missing record is an error isNotFound
// recognises.
func (s *S3Store) readRecord(ctx context.Context, id string) ([]byte, error) {
	obj, err := s.cl.GetObject(ctx, s.bucket, s.key(recordKey(id)), minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return readRecord(obj)
}

// Get implements Store.
func (s *S3Store) Get(ctx context.Context, id string) (*record.Metadata, error) {
	if err := record.ValidName("capture id", id); err != nil {
		return nil, err
	}
	b, err := s.readRecord(ctx, id)
	if isNotFound(err) {
		return nil, fmt.Errorf("capture %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("capture %s: read %s: %w", id, s.url(recordKey(id)), err)
	}
	return decodeRecord(id, b)
}

// List implements Store.
func (s *S3Store) List(ctx context.Context) ([]record.Metadata, error) {
	dir := s.key(capturesDir) + "/"
	var names []string
	for obj := range s.cl.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: dir, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list captures in %s: %w", s.url(capturesDir), obj.Err)
		}
		name := strings.TrimPrefix(obj.Key, dir)
		if name == "" || strings.HasSuffix(name, "/") {
			continue // a folder marker, as consoles and some servers make
		}
		names = append(names, name)
	}
	slices.Sort(names)
	var out []record.Metadata
	var bad []error
	for _, name := range names {
		id, err := recordID(name)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		md, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			bad = append(bad, err)
			continue
		}
		out = append(out, *md)
	}
	return out, listError(bad)
}

// Open implements Store.
func (s *S3Store) Open(ctx context.Context, id, file string) (io.ReadCloser, error) {
	if err := record.ValidName("file name", file); err != nil {
		return nil, err
	}
	md, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	f, ok := md.FileNamed(file)
	if !ok {
		return nil, fmt.Errorf("capture %s file %s: %w", id, file, ErrNotFound)
	}
	obj, err := s.cl.GetObject(ctx, s.bucket, s.key(objectKey(f.SHA256)), minio.GetObjectOptions{})
	if err == nil {
		_, err = obj.Stat() // GetObject is lazy: this sends the request
	}
	if err != nil {
		if obj != nil {
			obj.Close()
		}
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: capture %s file %s: object %s is missing", record.ErrCorrupt, id, file, s.url(objectKey(f.SHA256)))
		}
		return nil, fmt.Errorf("capture %s file %s: %w", id, file, err)
	}
	return newVerifiedReader(obj, id, f), nil
}

// Delete implements Store.
func (s *S3Store) Delete(ctx context.Context, id string) error {
	md, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if err := s.cl.RemoveObject(ctx, s.bucket, s.key(recordKey(id)), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete capture %s: %w", id, err)
	}
	others, err := s.List(ctx)
	if err != nil {
		return fmt.Errorf("capture %s deleted, its objects kept: cannot tell which other captures use them: %w", id, err)
	}
	for _, sha := range unreferenced(md, others) {
		if err := s.cl.RemoveObject(ctx, s.bucket, s.key(objectKey(sha)), minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
			return fmt.Errorf("capture %s deleted: remove object %s: %w", id, sha, err)
		}
	}
	return nil
}

// isNotFound reports a missing key (not a missing bucket, which is a
// configuration error to report as it is).
func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	resp := minio.ToErrorResponse(err)
	return resp.Code == "NoSuchKey" || (resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket")
}

func isPreconditionFailed(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed"
}

var _ Store = (*S3Store)(nil)
