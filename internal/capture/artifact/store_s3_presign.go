package artifact

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// Bounds of a presigned URL's lifetime. S3's signature version 4 refuses
// more than seven days; a link handed to a browser should live for
// minutes, long enough to follow a redirect and read one file.
const (
	MinPresignTTL = time.Second
	MaxPresignTTL = 7 * 24 * time.Hour
)

// Presigned is a URL that GETs one object of an artifact without the
// store's credentials, until Expires.
type Presigned struct {
	URL     *url.URL
	File    record.File // the file it reads, as the record names it
	Expires time.Time
}

// PresignGet returns a URL, signed with the store's credentials, that
// lets whoever holds it GET file of capture id, and nothing else, for
// ttl. The signature covers the object's key and the response headers
// asked for here (contentType as Content-Type, and the file's name as an
// inline Content-Disposition), so the holder can change neither.
//
// Unlike Open, nothing checks the bytes the holder reads against the
// record: the object's key is its sha256, so they differ only if someone
// with write access to the bucket replaced it. A caller that must vouch
// for the bytes reads them with Open instead.
func (s *S3Store) PresignGet(ctx context.Context, id, file string, ttl time.Duration, contentType string) (Presigned, error) {
	if ttl < MinPresignTTL || ttl > MaxPresignTTL {
		return Presigned{}, fmt.Errorf("presign capture %s file %s: lifetime %v, want %v to %v (S3 refuses longer)", id, file, ttl, MinPresignTTL, MaxPresignTTL)
	}
	if err := record.ValidName("file name", file); err != nil {
		return Presigned{}, err
	}
	md, err := s.Get(ctx, id)
	if err != nil {
		return Presigned{}, err
	}
	f, ok := md.FileNamed(file)
	if !ok {
		return Presigned{}, fmt.Errorf("capture %s file %s: %w", id, file, ErrNotFound)
	}
	params := url.Values{}
	if contentType != "" {
		params.Set("response-content-type", contentType)
	}
	// ValidName allows no quote or control character in a file name.
	params.Set("response-content-disposition", `inline; filename="`+f.Name+`"`)
	now := time.Now()
	u, err := s.cl.PresignedGetObject(ctx, s.bucket, s.key(objectKey(f.SHA256)), ttl, params)
	if err != nil {
		return Presigned{}, fmt.Errorf("presign capture %s file %s: %w", id, file, err)
	}
	return Presigned{URL: u, File: f, Expires: now.Add(ttl)}, nil
}
