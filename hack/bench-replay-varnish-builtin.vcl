vcl 4.1;
# Varnish with its built-in VCL (hack/bench.sh, part 9): only the backend
# and an X-Cache header for the replay to count hits; every subroutine
# falls through to builtin.vcl (a request with a Cookie is passed, Vary is
# honoured, http_gzip_support asks the origin for gzip). hack/bench.sh
# fills in the origin's address.
backend default {
  .host = "__ORIGIN_HOST__";
  .port = "__ORIGIN_PORT__";
}

sub vcl_deliver {
  if (obj.hits > 0) {
    set resp.http.X-Cache = "HIT";
  } else {
    set resp.http.X-Cache = "MISS";
  }
}
