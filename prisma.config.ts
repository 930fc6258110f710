// Prisma 7 reads the datasource URL only from here. The service itself never runs Prisma's CLI
// against a database (its migrate engine cannot be fetched here): generate needs no URL.
import { defineConfig } from 'prisma/config';

export default defineConfig({
  schema: 'prisma/schema.prisma',
  migrations: { path: 'prisma/migrations' },
  datasource: { url: process.env.DATABASE_URL ?? 'postgresql://localhost/metal' },
});
