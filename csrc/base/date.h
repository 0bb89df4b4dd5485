/* The Date header, formatted at most once a second. */
#ifndef PS_DATE_H
#define PS_DATE_H

#include <time.h>

#include "base/buf.h"

/* Returns "Date: <IMF-fixdate>\r\n" for `now`; the slice stays valid until
 * the next call with a different second. */
ps_slice_t ps_date_header(time_t now);

#endif
