// Package objstore is Knotless's one client of S3-compatible object
// stores: the runners' shared caches (knotless-run --cache-store) and the
// server's outputs and finished logs (knotless-server --object-store) both
// go through a Bucket.
//
// It wraps github.com/minio/minio-go/v7, which signs (AWS Signature
// Version 4), retries and reads credentials; nothing here signs a request.
// Credentials come from the standard places, in this order, and never from
// a command line: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN) in the environment; the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile AWS_PROFILE);
// a Kubernetes projected service-account token exchanged for a role
// (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, as EKS's IAM roles for
// service accounts set them); the ECS and EC2 instance endpoints.
//
// Every call is bounded in time (Config.Timeout) and every failure has a
// one-line description (Describe) for the log a user reads: the store is
// unreachable, refuses the credentials, has no such bucket, says the
// clock is off, is full, or was too slow. A caller that must never fail a
// run on the store's account (the caches) treats each as "go on without".
//
// An object written by Put is visible only once whole (S3's PutObject and
// CompleteMultipartUpload are atomic), and PutIfAbsent never replaces an
// object (If-None-Match: *), so two writers of one name leave one whole
// object.
package objstore
